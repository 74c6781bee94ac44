package server

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
)

// This file turns request-level inference parameters into InferRequest
// fields the way Triton's front ends do. It is shared by the HTTP and gRPC
// front ends: each decodes its wire form into one of the value types below
// and calls applyRequestParameter per key.

// Reserved request parameter keys (extension_parameters.md).
const (
	paramSequenceID       = "sequence_id"
	paramSequenceStart    = "sequence_start"
	paramSequenceEnd      = "sequence_end"
	paramPriority         = "priority"
	paramTimeout          = "timeout"
	paramBinaryDataOutput = "binary_data_output"
)

// applyRequestParameter sets one request-level parameter on req.
//
// value is a bool, int64, uint64, float64 or string; any other value is
// reported as a parameter of invalid type. The reserved keys set the
// correlation id, flags, priority and queue timeout; keys starting with
// "triton_" are refused; every other key becomes a custom parameter that the
// model sees. A uint64 custom value (an integer too large for int64) is kept
// as a float64, which is what Triton's HTTP front end does with it.
// binary_data_output is validated here but only the HTTP front end acts on
// it.
func applyRequestParameter(req *backendapi.InferRequest, key string, value any) error {
	switch key {
	case paramSequenceID:
		switch v := value.(type) {
		case uint64:
			req.CorrelationID = backendapi.CorrelationID{Uint: v}
		case int64:
			if v < 0 {
				return fieldError("Unable to parse 'sequence_id'", msgNotString)
			}
			req.CorrelationID = backendapi.CorrelationID{Uint: uint64(v)}
		case string:
			req.CorrelationID = backendapi.CorrelationID{String: v, IsText: true}
		default:
			return fieldError("Unable to parse 'sequence_id'", msgNotString)
		}
	case paramSequenceStart, paramSequenceEnd:
		b, ok := value.(bool)
		if !ok {
			return fieldError("Unable to parse '"+key+"'", msgNotBool)
		}
		flag := backendapi.FlagSequenceStart
		if key == paramSequenceEnd {
			flag = backendapi.FlagSequenceEnd
		}
		if b {
			req.Flags |= flag
		} else {
			req.Flags &^= flag
		}
	case paramPriority:
		p, ok := paramUint(value)
		if !ok {
			return fieldError("Unable to parse 'priority'", msgNotUint)
		}
		req.Priority = p
	case paramTimeout:
		us, ok := paramUint(value)
		if !ok {
			return fieldError("Unable to parse 'timeout'", msgNotUint)
		}
		if us > math.MaxInt64/uint64(time.Microsecond) {
			req.Timeout = math.MaxInt64
		} else {
			req.Timeout = time.Duration(us) * time.Microsecond
		}
	case paramBinaryDataOutput:
		if _, ok := value.(bool); !ok {
			return fieldError("Unable to parse 'binary_data_output'", msgNotBool)
		}
	default:
		if strings.HasPrefix(key, "triton_") {
			return backendapi.Errorf(backendapi.InvalidArg, "%s", msgReservedParam)
		}
		switch v := value.(type) {
		case string, int64, bool, float64:
		case uint64:
			value = float64(v)
		default:
			return invalidArg("parameter '%s' has invalid type. It should be either 'int', 'bool', or 'string'.", key)
		}
		if req.Parameters == nil {
			req.Parameters = make(map[string]any, 4)
		}
		req.Parameters[key] = value
	}
	return nil
}

func paramUint(v any) (uint64, bool) {
	switch x := v.(type) {
	case uint64:
		return x, true
	case int64:
		return uint64(x), x >= 0
	}
	return 0, false
}

// parseModelVersion parses the version segment of a model URL or the
// version field of a gRPC request: "" means "let the version policy choose"
// (0 in backendapi).
func parseModelVersion(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		detail := "stol"
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrSyntax {
			detail = "invalid stol argument"
		}
		return 0, invalidArg("failed to get model version from specified version string '%s' (details: %s), version should be an integral value > 0", s, detail)
	}
	if v < 0 {
		return 0, invalidArg("invalid model version specified '%s' , version should be an integral value > 0", s)
	}
	return v, nil
}
