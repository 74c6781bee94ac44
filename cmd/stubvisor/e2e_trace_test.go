package main

// The trace extension end to end: Triton's JSON trace file, the settings
// endpoints over HTTP and gRPC, and OpenTelemetry export to an OTLP/HTTP
// receiver built from the collector's protobuf types.

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// traceRecord is one object of Triton's trace file.
type traceRecord struct {
	ID           uint64 `json:"id"`
	ModelName    string `json:"model_name"`
	ModelVersion *int64 `json:"model_version"`
	RequestID    string `json:"request_id"`
	ParentID     uint64 `json:"parent_id"`
	Timestamps   []struct {
		Name string `json:"name"`
		NS   int64  `json:"ns"`
	} `json:"timestamps"`
	Activity string `json:"activity"`
	Tensor   struct {
		Name, Data, Shape, Dtype string
	} `json:"tensor"`
}

// traceOf gathers the records of one trace id.
type traceOf struct {
	header  traceRecord
	names   []string // timestamp names in file order
	ns      map[string]int64
	tensors map[string]traceRecord // activity + "/" + tensor name
}

func readTraceFile(t *testing.T, path string) map[uint64]*traceOf {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var recs []traceRecord
	if err := json.Unmarshal(b, &recs); err != nil {
		t.Fatalf("trace file is not a JSON array of records: %v\n%s", err, b)
	}
	out := map[uint64]*traceOf{}
	for _, r := range recs {
		tr := out[r.ID]
		if tr == nil {
			tr = &traceOf{ns: map[string]int64{}, tensors: map[string]traceRecord{}}
			out[r.ID] = tr
		}
		switch {
		case r.ModelName != "":
			tr.header = r
		case r.Activity != "":
			tr.tensors[r.Activity+"/"+r.Tensor.Name] = r
		default:
			for _, ts := range r.Timestamps {
				tr.names = append(tr.names, ts.Name)
				tr.ns[ts.Name] = ts.NS
			}
		}
	}
	return out
}

// traceRepo is add_sub, bls_trace and ens_trace, an ensemble of ens_scale
// then ens_offset (OUTPUT0 = 2 * INPUT0 + 1).
func traceRepo(t *testing.T) string {
	t.Helper()
	repo := copyRepo(t, "add_sub", "bls_trace", "ens_scale", "ens_offset")
	httpWriteModel(t, repo, "ens_trace", `name: "ens_trace"
platform: "ensemble"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
ensemble_scheduling { step [
  { model_name: "ens_scale", model_version: -1, input_map { key: "INPUT0" value: "INPUT0" }, output_map { key: "OUTPUT0" value: "scaled" } },
  { model_name: "ens_offset", model_version: -1, input_map { key: "INPUT0" value: "scaled" }, output_map { key: "OUTPUT0" value: "OUTPUT0" } }
] }
`, nil)
	return repo
}

// ensTraceRequest is a JSON infer request for ens_trace.
func ensTraceRequest() map[string]any {
	return map[string]any{"id": "ens-1", "inputs": []map[string]any{{"name": "INPUT0", "shape": []int{2}, "datatype": "FP32", "data": []float32{1, 2}}}}
}

func TestTraceTritonFile(t *testing.T) {
	ipctest.RequirePython(t)
	file := filepath.Join(t.TempDir(), "trace.json")
	s := startServer(t, traceRepo(t), "--trace-config", "triton,file="+file,
		"--trace-config", "level=TIMESTAMPS", "--trace-config", "level=TENSORS", "--trace-config", "rate=1")

	t.Run("settings", func(t *testing.T) {
		var g map[string]any
		s.getJSON("/v2/trace/setting", &g)
		want := map[string]any{"trace_level": []any{"TIMESTAMPS", "TENSORS"}, "trace_rate": "1", "trace_count": "-1",
			"log_frequency": "0", "trace_file": file, "trace_mode": "triton"}
		if httpCanonJSON(t, httpMustJSON(t, g)) != httpCanonJSON(t, httpMustJSON(t, want)) {
			t.Fatalf("global settings %v", g)
		}
		code, body := s.postJSON("/v2/models/add_sub/trace/setting", map[string]any{"trace_rate": "3"})
		if code != 200 || !strings.Contains(string(body), `"trace_rate":"3"`) || !strings.Contains(string(body), `"TENSORS"`) {
			t.Fatalf("model update: %d %s", code, body)
		}
		code, body = s.postJSON("/v2/models/add_sub/trace/setting", map[string]any{"trace_rate": nil})
		if code != 200 || !strings.Contains(string(body), `"trace_rate":"1"`) {
			t.Fatalf("model clear: %d %s", code, body)
		}
		for _, c := range []struct {
			body   map[string]any
			status int
			msg    string
		}{
			{map[string]any{"trace_file": "/tmp/x"}, 501, "trace file location can not be updated through network protocol"},
			{map[string]any{"trace_rate": "abc"}, 400, "Unable to parse 'trace_rate', got: abc"},
			{map[string]any{"trace_count": "-2"}, 400, "Unable to parse 'trace_count'. Expecting value >= -1, got:-2"},
			{map[string]any{"trace_level": []string{"OFF", "TIMESTAMPS"}}, 400, "Expect only one trace level 'OFF' is specified"},
		} {
			code, body := s.postJSON("/v2/trace/setting", c.body)
			if code != c.status || errorText(body) != c.msg {
				t.Errorf("%v: %d %s", c.body, code, body)
			}
		}
		code, body = s.postJSON("/v2/models/nope/trace/setting", map[string]any{})
		if code != 400 || errorText(body) != "Request for unknown model : nope" {
			t.Fatalf("unknown model: %d %s", code, body)
		}
	})

	t.Run("requests", func(t *testing.T) {
		req := httpAddSubJSON([]float32{1, 2, 3, 4}, []float32{1, 1, 1, 1})
		req["id"] = "traced-1"
		if code, body := s.httpInferJSON("add_sub", req); code != 200 {
			t.Fatalf("infer: %d %s", code, body)
		}
		_, c := grpcClient(t, s)
		ctx := callCtx(t)
		if _, err := c.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "add_sub", Id: "traced-2",
			Inputs: []*pb.ModelInferRequest_InferInputTensor{
				{Name: "INPUT0", Datatype: "FP32", Shape: []int64{4}}, {Name: "INPUT1", Datatype: "FP32", Shape: []int64{4}}},
			RawInputContents: [][]byte{ipctest.FP32(1, 2, 3, 4), ipctest.FP32(1, 1, 1, 1)}}); err != nil {
			t.Fatal(err)
		}
		// A BLS model's call made with trace=request.trace() is a trace of
		// its own whose parent is the BLS model's.
		blsReq := httpAddSubJSON([]float32{1, 2, 3, 4}, []float32{1, 1, 1, 1})
		blsReq["id"] = "traced-3"
		code, body := s.httpInferJSON("bls_trace", blsReq)
		if code != 200 || !strings.Contains(string(body), `triton_trace_id`) {
			t.Fatalf("bls infer: %d %s", code, body)
		}
		// An ensemble's steps are traces under the ensemble's.
		if code, body := s.httpInferJSON("ens_trace", ensTraceRequest()); code != 200 {
			t.Fatalf("ensemble infer: %d %s", code, body)
		}
		// Tracing off for the model: the next request leaves no trace.
		tr, err := c.TraceSetting(ctx, &pb.TraceSettingRequest{ModelName: "add_sub",
			Settings: map[string]*pb.TraceSettingRequest_SettingValue{"trace_level": {Value: []string{"OFF"}}}})
		if err != nil || strings.Join(tr.Settings["trace_level"].GetValue(), ",") != "OFF" {
			t.Fatalf("model trace off: %v %v", tr, err)
		}
		if code, body := s.httpInferJSON("add_sub", httpAddSubJSON([]float32{1, 2, 3, 4}, []float32{1, 1, 1, 1})); code != 200 {
			t.Fatalf("infer: %d %s", code, body)
		}
	})

	s.Stop() // the trace file is written at shutdown (log_frequency 0)
	traces := readTraceFile(t, file)
	if len(traces) != 7 {
		t.Fatalf("%d traces in the file, want 7", len(traces))
	}
	var bls, child, ens *traceOf
	steps := map[string]*traceOf{}
	for _, x := range traces {
		switch {
		case x.header.ModelName == "bls_trace":
			bls = x
		case x.header.ModelName == "ens_trace":
			ens = x
		case x.header.ModelName == "add_sub" && x.header.ParentID != 0:
			child = x
		case x.header.ParentID != 0:
			steps[x.header.ModelName] = x
		}
	}
	if ens == nil || len(steps) != 2 || steps["ens_scale"] == nil || steps["ens_offset"] == nil ||
		steps["ens_scale"].header.ParentID != ens.header.ID || steps["ens_offset"].header.ParentID != ens.header.ID {
		t.Fatalf("ensemble traces: %+v steps %+v", ens, steps)
	}
	if steps["ens_offset"].ns["REQUEST_START"] < steps["ens_scale"].ns["REQUEST_END"] {
		t.Errorf("the second step's trace starts before the first one's ends")
	}
	if bls == nil || child == nil || child.header.ParentID != bls.header.ID || child.header.ModelName != "add_sub" {
		t.Fatalf("BLS traces: parent %+v child %+v", bls, child)
	}
	if child.ns["REQUEST_START"] < bls.ns["COMPUTE_START"] || child.ns["REQUEST_END"] > bls.ns["COMPUTE_END"] {
		t.Errorf("the BLS call's trace is not inside its caller's compute")
	}
	if _, ok := child.tensors["TENSOR_QUEUE_INPUT/INPUT0"]; ok {
		t.Errorf("a BLS child trace has the front end's tensor records")
	}
	core := []string{"REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END"}
	for _, c := range []struct {
		id    string
		outer []string
	}{
		{"traced-1", []string{"HTTP_RECV_START", "HTTP_RECV_END", "HTTP_SEND_START", "HTTP_SEND_END"}},
		{"traced-2", []string{"GRPC_WAITREAD_START", "GRPC_WAITREAD_END", "GRPC_SEND_START", "GRPC_SEND_END"}},
	} {
		var tr *traceOf
		for _, x := range traces {
			if x.header.RequestID == c.id {
				tr = x
			}
		}
		if tr == nil {
			t.Fatalf("no trace of request %s", c.id)
		}
		if tr.header.ModelName != "add_sub" || tr.header.ModelVersion == nil || *tr.header.ModelVersion != -1 {
			t.Errorf("%s header %+v", c.id, tr.header)
		}
		want := slices.Concat(c.outer[:2], core, c.outer[2:])
		for i, name := range want {
			if _, ok := tr.ns[name]; !ok {
				t.Errorf("%s lacks %s: %v", c.id, name, tr.names)
			} else if i > 0 && tr.ns[name] < tr.ns[want[i-1]] {
				t.Errorf("%s: %s before %s", c.id, name, want[i-1])
			}
		}
		for key, data := range map[string]string{"TENSOR_QUEUE_INPUT/INPUT0": "1,2,3,4", "TENSOR_QUEUE_INPUT/INPUT1": "1,1,1,1",
			"TENSOR_BACKEND_OUTPUT/OUTPUT0": "2,3,4,5", "TENSOR_BACKEND_OUTPUT/OUTPUT1": "0,1,2,3"} {
			r, ok := tr.tensors[key]
			if !ok || r.Tensor.Data != data || r.Tensor.Shape != "4" || r.Tensor.Dtype != "FP32" {
				t.Errorf("%s tensor %s: %+v", c.id, key, r)
			}
		}
	}
}

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes every export
// request with the collector's protobuf types and hands over its spans.
type otlpReceiver struct {
	url   string
	spans chan *tracepb.Span
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rc := &otlpReceiver{url: "http://" + l.Addr().String() + "/v1/traces", spans: make(chan *tracepb.Span, 1024)}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rd io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			rd = zr
		}
		b, err := io.ReadAll(rd)
		var req collectortrace.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &req)
		}
		if r.URL.Path != "/v1/traces" || err != nil {
			http.Error(w, "bad export", 400)
			return
		}
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					select {
					case rc.spans <- sp:
					default:
					}
				}
			}
		}
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return rc
}

// collect waits for n spans under the client's trace id.
func (rc *otlpReceiver) collect(t *testing.T, traceID []byte, n int) []*tracepb.Span {
	t.Helper()
	var got []*tracepb.Span
	deadline := time.After(60 * time.Second)
	for len(got) < n {
		select {
		case sp := <-rc.spans:
			if bytes.Equal(sp.TraceId, traceID) {
				got = append(got, sp)
			}
		case <-deadline:
			t.Fatalf("%d spans of trace %x within 60s, want %d: %v", len(got), traceID, len(got), n)
		}
	}
	return got
}

// byName indexes the spans of a one-model trace by name.
func byName(spans []*tracepb.Span) map[string]*tracepb.Span {
	m := map[string]*tracepb.Span{}
	for _, sp := range spans {
		m[sp.Name] = sp
	}
	return m
}

// childOf finds the span named name whose parent is parent.
func childOf(t *testing.T, spans []*tracepb.Span, name string, parent *tracepb.Span) *tracepb.Span {
	t.Helper()
	for _, sp := range spans {
		if sp.Name == name && bytes.Equal(sp.ParentSpanId, parent.SpanId) {
			return sp
		}
	}
	t.Fatalf("no span %q under %q", name, parent.Name)
	return nil
}

func TestTraceOpenTelemetry(t *testing.T) {
	ipctest.RequirePython(t)
	rc := startOTLPReceiver(t)
	// rate 0: only requests that carry a trace context are traced.
	s := startServer(t, traceRepo(t), "--trace-config", "mode=opentelemetry",
		"--trace-config", "opentelemetry,url="+rc.url, "--trace-config", "opentelemetry,bsp_schedule_delay=50",
		"--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=0")
	clientSpan, _ := hex.DecodeString("00f067aa0ba902b7")
	check := func(t *testing.T, traceHex string, spans map[string]*tracepb.Span) {
		t.Helper()
		root, model, queue, compute := spans["InferRequest"], spans["add_sub"], spans["queue"], spans["compute"]
		if root == nil || model == nil || queue == nil || compute == nil {
			t.Fatalf("spans %v", spans)
		}
		if !bytes.Equal(root.ParentSpanId, clientSpan) {
			t.Errorf("InferRequest's parent %x, want the client's span %x", root.ParentSpanId, clientSpan)
		}
		if !bytes.Equal(model.ParentSpanId, root.SpanId) || !bytes.Equal(queue.ParentSpanId, model.SpanId) || !bytes.Equal(compute.ParentSpanId, model.SpanId) {
			t.Errorf("span tree: model<-%x queue<-%x compute<-%x (root %x model %x)", model.ParentSpanId, queue.ParentSpanId, compute.ParentSpanId, root.SpanId, model.SpanId)
		}
		if queue.EndTimeUnixNano > compute.StartTimeUnixNano || compute.EndTimeUnixNano > model.EndTimeUnixNano || model.StartTimeUnixNano < root.StartTimeUnixNano {
			t.Errorf("span times out of order")
		}
		attrs := map[string]string{}
		for _, a := range model.Attributes {
			attrs[a.Key] = a.Value.String()
		}
		if !strings.Contains(attrs["triton.model_name"], "add_sub") || !strings.Contains(attrs["triton.model_version"], "-1") {
			t.Errorf("model span attributes %v", attrs)
		}
		var events []string
		for _, e := range compute.Events {
			events = append(events, e.Name)
		}
		if strings.Join(events, ",") != "COMPUTE_START,COMPUTE_INPUT_END,COMPUTE_OUTPUT_START,COMPUTE_END" {
			t.Errorf("compute events %v", events)
		}
	}
	// traced posts an infer request under the client's span of trace
	// traceHex and returns the answer and the n spans the server sent.
	traced := func(t *testing.T, model string, req any, traceHex string, n int) ([]byte, []*tracepb.Span) {
		t.Helper()
		code, _, resp := s.do("POST", "/v2/models/"+model+"/infer", httpMustJSON(t, req), "traceparent", "00-"+traceHex+"-00f067aa0ba902b7-01")
		if code != 200 {
			t.Fatalf("infer: %d %s", code, resp)
		}
		id, _ := hex.DecodeString(traceHex)
		return resp, rc.collect(t, id, n)
	}
	addSub := httpAddSubJSON([]float32{1, 2, 3, 4}, []float32{1, 1, 1, 1})
	t.Run("http traceparent", func(t *testing.T) {
		const traceHex = "4bf92f3577b34da6a3ce929d0e0e4736"
		_, spans := traced(t, "add_sub", addSub, traceHex, 4)
		check(t, traceHex, byName(spans))
	})
	t.Run("bls call joins the trace", func(t *testing.T) {
		const traceHex = "5bf92f3577b34da6a3ce929d0e0e4737"
		resp, spans := traced(t, "bls_trace", addSub, traceHex, 7)
		root := byName(spans)["InferRequest"]
		if root == nil || !bytes.Equal(root.ParentSpanId, clientSpan) {
			t.Fatalf("no InferRequest span under the client's: %v", spans)
		}
		bls := childOf(t, spans, "bls_trace", root)
		childOf(t, spans, "queue", bls)
		compute := childOf(t, spans, "compute", bls)
		call := childOf(t, spans, "add_sub", compute)
		childOf(t, spans, "queue", call)
		childOf(t, spans, "compute", call)
		// The model saw its span's context through request.trace().
		want := `{"traceparent":"00-` + traceHex + "-" + hex.EncodeToString(bls.SpanId) + `-01"}`
		if !strings.Contains(string(resp), strings.ReplaceAll(want, `"`, `\"`)) {
			t.Fatalf("TRACE output lacks %s: %s", want, resp)
		}
	})
	t.Run("ensemble steps", func(t *testing.T) {
		const traceHex = "6bf92f3577b34da6a3ce929d0e0e4738"
		_, spans := traced(t, "ens_trace", ensTraceRequest(), traceHex, 8)
		root := byName(spans)["InferRequest"]
		if root == nil {
			t.Fatalf("no InferRequest span: %v", spans)
		}
		ens := childOf(t, spans, "ens_trace", root)
		for _, step := range []string{"ens_scale", "ens_offset"} {
			sp := childOf(t, spans, step, ens)
			childOf(t, spans, "queue", sp)
			childOf(t, spans, "compute", sp)
		}
	})
	t.Run("grpc traceparent", func(t *testing.T) {
		const traceHex = "0af7651916cd43dd8448eb211c80319c"
		_, c := grpcClient(t, s)
		ctx := metadata.AppendToOutgoingContext(callCtx(t), "traceparent", "00-"+traceHex+"-00f067aa0ba902b7-01")
		if _, err := c.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "add_sub",
			Inputs: []*pb.ModelInferRequest_InferInputTensor{
				{Name: "INPUT0", Datatype: "FP32", Shape: []int64{4}}, {Name: "INPUT1", Datatype: "FP32", Shape: []int64{4}}},
			RawInputContents: [][]byte{ipctest.FP32(1, 2, 3, 4), ipctest.FP32(1, 1, 1, 1)}}); err != nil {
			t.Fatal(err)
		}
		id, _ := hex.DecodeString(traceHex)
		check(t, traceHex, byName(rc.collect(t, id, 4)))
	})
	t.Run("settings", func(t *testing.T) {
		var g map[string]any
		s.getJSON("/v2/trace/setting", &g)
		if g["trace_mode"] != "opentelemetry" || g["url"] != rc.url || g["trace_rate"] != "0" {
			t.Fatalf("settings %v", g)
		}
		if _, ok := g["trace_file"]; ok {
			t.Fatalf("opentelemetry settings list trace_file: %v", g)
		}
	})
}
