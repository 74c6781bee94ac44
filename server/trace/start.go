package trace

import (
	"context"
	"net/http"

	"google.golang.org/grpc/metadata"
)

// ParentHeader is the header (and gRPC metadata key) of the W3C trace
// context.
const ParentHeader = "traceparent"

// MsgTraceFile is Triton's text for an update that names trace_file.
const MsgTraceFile = "trace file location can not be updated through network protocol"

// StartHTTP starts the trace of an HTTP request to model, or returns nil;
// it stamps HTTP_RECV_START.
func (t *Tracer) StartHTTP(model string, version int64, r *http.Request) *Request {
	if t == nil || !t.on.Load() {
		return nil
	}
	rt := t.start(model, version, r.Header.Get(ParentHeader))
	rt.Stamp("HTTP_RECV_START")
	return rt
}

// StartGRPC starts the trace of a gRPC request, or returns nil; the
// request has been read, so it stamps GRPC_WAITREAD_START and _END.
func (t *Tracer) StartGRPC(ctx context.Context, model string, version int64) *Request {
	if t == nil || !t.on.Load() {
		return nil
	}
	parent := ""
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if p := md.Get(ParentHeader); len(p) > 0 {
			parent = p[0]
		}
	}
	rt := t.start(model, version, parent)
	rt.Stamp("GRPC_WAITREAD_START")
	rt.Stamp("GRPC_WAITREAD_END")
	return rt
}
