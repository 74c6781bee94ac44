package server

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"google.golang.org/grpc/metadata"

	"github.com/stubvisor/stubvisor/backendapi"
)

// This file forwards request headers to the model as request parameters
// (tritonserver's --http-header-forward-pattern and
// --grpc-header-forward-pattern): every header whose name the pattern
// matches anywhere, case-insensitively, becomes a string parameter.

// compileForwardPattern compiles a header forward pattern the way Triton
// does: a partial match, case-insensitive unless the pattern turns that off
// with (?-i). An empty pattern forwards nothing (nil).
func compileForwardPattern(pattern string) (*regexp.Regexp, error) {
	if pattern == "" {
		return nil, nil
	}
	re, err := regexp.Compile("(?i)" + pattern)
	if err != nil {
		return nil, fmt.Errorf("server: header forward pattern %q: %w", pattern, err)
	}
	return re, nil
}

// reservedHeaderKeys are the parameter keys a forwarded header may not
// set (Triton's kReservedParameterKeys); keys starting with "triton_" are
// refused too.
var reservedHeaderKeys = map[string]bool{
	paramSequenceID: true, paramSequenceStart: true, paramSequenceEnd: true,
	paramPriority: true, paramTimeout: true, "headers": true, paramBinaryDataOutput: true,
}

// forwardHeader adds header key with value to req's parameters when re
// matches it. A match on a reserved key is the client's error.
func forwardHeader(re *regexp.Regexp, req *backendapi.InferRequest, key, value string) error {
	if !re.MatchString(key) {
		return nil
	}
	if reservedHeaderKeys[key] || strings.HasPrefix(key, "triton_") {
		return invalidArg("Header '%s' is reserved for Triton usage and cannot be forwarded.", key)
	}
	if req.Parameters == nil {
		req.Parameters = map[string]any{}
	}
	req.Parameters[key] = value
	return nil
}

// forwardHTTPHeaders forwards the matching headers of an HTTP request. Go
// canonicalises header names, so they are forwarded in lower case, the
// form HTTP/2 and most clients send.
func forwardHTTPHeaders(re *regexp.Regexp, req *backendapi.InferRequest, h map[string][]string) error {
	for k, vs := range h {
		key := strings.ToLower(k)
		for _, v := range vs {
			if err := forwardHeader(re, req, key, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// forwardMetadata forwards the matching metadata of a gRPC call (on a
// stream, the metadata the stream was opened with).
func (g *GRPCServer) forwardMetadata(ctx context.Context, req *backendapi.InferRequest) error {
	if g.forward == nil {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for k, vs := range md {
		for _, v := range vs {
			if err := forwardHeader(g.forward, req, k, v); err != nil {
				return err
			}
		}
	}
	return nil
}
