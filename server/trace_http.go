package server

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/stubvisor/stubvisor/backendapi"
	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/server/trace"
)

// The trace setting endpoints: GET and POST /v2[/models/{m}]/trace/setting
// and the TraceSetting RPC. An update names only the settings it changes;
// null (HTTP) or an empty value list (gRPC) clears a model's setting so
// that it follows the global one again. trace_file cannot be changed.

// handleTrace serves /v2/trace/setting (model "") and
// /v2/models/{m}/trace/setting.
func (s *Server) handleTrace(w http.ResponseWriter, r *http.Request, model string) {
	if !allow(w, r, http.MethodGet, http.MethodPost) {
		return
	}
	if model != "" {
		if err := trace.ModelCheck(s.backend.ModelReady(r.Context(), model, 0), model); err != nil {
			writeError(w, err)
			return
		}
	}
	if r.Method == http.MethodPost {
		body, err := readControlBody(r, s.maxInput)
		if err == nil {
			var u *trace.Update
			if u, err = parseTraceUpdateJSON(body); err == nil {
				err = s.tracer.Apply(model, u)
			}
		}
		if err != nil {
			writeError(w, err)
			return
		}
	}
	b := []byte{'{'}
	for i, kv := range s.tracer.Settings(model) {
		b = appendJSONKey(b, i == 0, kv[0].(string))
		b = appendJSONValue(b, kv[1])
	}
	writeRawJSON(w, append(b, '}'))
}

// parseTraceUpdateJSON reads a POSTed update: every value a string (or
// null), trace_level an array of strings.
func parseTraceUpdateJSON(body []byte) (*trace.Update, error) {
	obj, err := parseJSONObject(body, true)
	if err != nil {
		return nil, err
	}
	if _, ok := obj["trace_file"]; ok {
		return nil, backendapi.Errorf(backendapi.Unsupported, "%s", trace.MsgTraceFile)
	}
	u := &trace.Update{}
	if raw, ok := obj["trace_level"]; ok {
		u.HasLevel, u.ClearLevel = true, isNull(raw)
		if !u.ClearLevel {
			if err := json.Unmarshal(raw, &u.LevelValues); err != nil {
				return nil, invalidArg("%s", msgNotArray)
			}
		}
	}
	for _, f := range u.ScalarSettings() {
		raw, ok := obj[f.Key]
		if !ok {
			continue
		}
		*f.Has, *f.Clear = true, isNull(raw)
		if *f.Clear {
			continue
		}
		v, err := rawString(raw)
		if err != nil {
			return nil, err
		}
		*f.Val = &v
	}
	return u, nil
}

// TraceSetting reads and updates the trace settings over gRPC.
func (g *GRPCServer) TraceSetting(ctx context.Context, req *pb.TraceSettingRequest) (*pb.TraceSettingResponse, error) {
	model := req.GetModelName()
	if model != "" {
		if err := trace.ModelCheck(g.backend.ModelReady(ctx, model, 0), model); err != nil {
			return nil, grpcError(err)
		}
	}
	if set := req.GetSettings(); len(set) > 0 {
		if _, ok := set["trace_file"]; ok {
			return nil, grpcError(backendapi.Errorf(backendapi.Unsupported, "%s", trace.MsgTraceFile))
		}
		u := &trace.Update{}
		if v, ok := set["trace_level"]; ok {
			u.HasLevel, u.ClearLevel, u.LevelValues = true, len(v.GetValue()) == 0, v.GetValue()
		}
		for _, f := range u.ScalarSettings() {
			v, ok := set[f.Key]
			if !ok {
				continue
			}
			*f.Has, *f.Clear = true, len(v.GetValue()) == 0
			if !*f.Clear {
				x := v.GetValue()[0]
				*f.Val = &x
			}
		}
		if err := g.tracer.Apply(model, u); err != nil {
			return nil, grpcError(err)
		}
	}
	out := &pb.TraceSettingResponse{Settings: map[string]*pb.TraceSettingResponse_SettingValue{}}
	for _, kv := range g.tracer.Settings(model) {
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

// traceJSON writes trace records with the front end's JSON writers.
type traceJSON struct{}

func (traceJSON) String(dst []byte, s string) []byte { return appendJSONString(dst, s) }

func (traceJSON) Data(dst []byte, name string, dt backendapi.DataType, data []byte, shape []int64) ([]byte, error) {
	return appendJSONData(dst, name, dt, data, elementCount(shape))
}
