package server

import (
	"context"
	"encoding/json"
	"net/http"

	"google.golang.org/grpc/metadata"

	"github.com/stubvisor/stubvisor/backendapi"
	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

// The trace setting endpoints: GET and POST /v2[/models/{m}]/trace/setting
// and the TraceSetting RPC. An update names only the settings it changes;
// null (HTTP) or an empty value list (gRPC) clears a model's setting so
// that it follows the global one again. trace_file cannot be changed.

const msgTraceFile = "trace file location can not be updated through network protocol"

// traceParent is the header (and gRPC metadata key) of the W3C trace context.
const traceParent = "traceparent"

// handleTrace serves /v2/trace/setting (model "") and
// /v2/models/{m}/trace/setting.
func (s *Server) handleTrace(w http.ResponseWriter, r *http.Request, model string) {
	if !allow(w, r, http.MethodGet, http.MethodPost) {
		return
	}
	if model != "" {
		if err := traceModelCheck(s.backend.ModelReady(r.Context(), model, 0), model); err != nil {
			writeError(w, err)
			return
		}
	}
	if r.Method == http.MethodPost {
		body, err := readControlBody(r, s.maxInput)
		if err == nil {
			var u *traceUpdate
			if u, err = parseTraceUpdateJSON(body); err == nil {
				err = s.tracer.apply(model, u)
			}
		}
		if err != nil {
			writeError(w, err)
			return
		}
	}
	b := []byte{'{'}
	for i, kv := range s.tracer.settings(model) {
		b = appendJSONKey(b, i == 0, kv[0].(string))
		b = appendJSONValue(b, kv[1])
	}
	writeRawJSON(w, append(b, '}'))
}

// parseTraceUpdateJSON reads a POSTed update: every value a string (or
// null), trace_level an array of strings.
func parseTraceUpdateJSON(body []byte) (*traceUpdate, error) {
	obj, err := parseJSONObject(body, true)
	if err != nil {
		return nil, err
	}
	if _, ok := obj["trace_file"]; ok {
		return nil, backendapi.Errorf(backendapi.Unsupported, "%s", msgTraceFile)
	}
	u := &traceUpdate{}
	if raw, ok := obj["trace_level"]; ok {
		u.hasLevel, u.clearLevel = true, isNull(raw)
		if !u.clearLevel {
			if err := json.Unmarshal(raw, &u.levelValues); err != nil {
				return nil, invalidArg("%s", msgNotArray)
			}
		}
	}
	for _, f := range u.scalarSettings() {
		raw, ok := obj[f.key]
		if !ok {
			continue
		}
		*f.has, *f.clear = true, isNull(raw)
		if *f.clear {
			continue
		}
		v, err := rawString(raw)
		if err != nil {
			return nil, err
		}
		*f.val = &v
	}
	return u, nil
}

// TraceSetting reads and updates the trace settings over gRPC.
func (g *GRPCServer) TraceSetting(ctx context.Context, req *pb.TraceSettingRequest) (*pb.TraceSettingResponse, error) {
	model := req.GetModelName()
	if model != "" {
		if err := traceModelCheck(g.backend.ModelReady(ctx, model, 0), model); err != nil {
			return nil, grpcError(err)
		}
	}
	if set := req.GetSettings(); len(set) > 0 {
		if _, ok := set["trace_file"]; ok {
			return nil, grpcError(backendapi.Errorf(backendapi.Unsupported, "%s", msgTraceFile))
		}
		u := &traceUpdate{}
		if v, ok := set["trace_level"]; ok {
			u.hasLevel, u.clearLevel, u.levelValues = true, len(v.GetValue()) == 0, v.GetValue()
		}
		for _, f := range u.scalarSettings() {
			v, ok := set[f.key]
			if !ok {
				continue
			}
			*f.has, *f.clear = true, len(v.GetValue()) == 0
			if !*f.clear {
				x := v.GetValue()[0]
				*f.val = &x
			}
		}
		if err := g.tracer.apply(model, u); err != nil {
			return nil, grpcError(err)
		}
	}
	out := &pb.TraceSettingResponse{Settings: map[string]*pb.TraceSettingResponse_SettingValue{}}
	for _, kv := range g.tracer.settings(model) {
		var vals []string
		switch v := kv[1].(type) {
		case []string:
			vals = v
		case string:
			vals = []string{v}
		}
		out.Settings[kv[0].(string)] = &pb.TraceSettingResponse_SettingValue{Value: vals}
	}
	return out, nil
}

// startHTTP starts the trace of an HTTP request to model, or returns nil;
// it stamps HTTP_RECV_START.
func (t *tracer) startHTTP(model string, version int64, r *http.Request) *reqTrace {
	if t == nil || !t.on.Load() {
		return nil
	}
	rt := t.start(model, version, r.Header.Get(traceParent))
	rt.stamp("HTTP_RECV_START")
	return rt
}

// startGRPC starts the trace of a gRPC request, or returns nil; the
// request has been read, so it stamps GRPC_WAITREAD_START and _END.
func (t *tracer) startGRPC(ctx context.Context, model string, version string) *reqTrace {
	if t == nil || !t.on.Load() {
		return nil
	}
	v, _ := parseModelVersion(version)
	parent := ""
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if p := md.Get(traceParent); len(p) > 0 {
			parent = p[0]
		}
	}
	rt := t.start(model, v, parent)
	rt.stamp("GRPC_WAITREAD_START")
	rt.stamp("GRPC_WAITREAD_END")
	return rt
}
