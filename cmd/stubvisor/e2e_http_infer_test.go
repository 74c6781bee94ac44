package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// httpInferJSONEveryDtype is the case "infer JSON every dtype" of TestHTTPEndpoints.
func httpInferJSONEveryDtype(t *testing.T, e httpSuite) {
	s := e.s
	var inputs []map[string]any
	for _, c := range httpDtypeCases {
		if c.json == "" {
			continue
		}
		inputs = append(inputs, map[string]any{"name": httpIOName("INPUT", c.dtype), "datatype": c.dtype,
			"shape": []int64{c.n}, "data": json.RawMessage(c.json)})
	}
	code, body := s.httpInferJSON("identity_all", map[string]any{"id": "json-dtypes", "inputs": inputs})
	r := httpDecodeInfer(t, code, http.Header{"Content-Type": {"application/json"}}, body)
	if r.ID != "json-dtypes" || r.ModelName != "identity_all" || r.ModelVersion != "1" {
		t.Errorf("id/model/version = %q/%q/%q", r.ID, r.ModelName, r.ModelVersion)
	}
	if len(r.Outputs) != len(inputs) {
		t.Errorf("%d outputs for %d inputs", len(r.Outputs), len(inputs))
	}
	for _, c := range httpDtypeCases {
		if c.json == "" {
			continue
		}
		o := r.output(t, httpIOName("OUTPUT", c.dtype))
		if o.Datatype != c.dtype || !slices.Equal(o.Shape, []int64{c.n}) {
			t.Errorf("%s: datatype %s shape %v", c.dtype, o.Datatype, o.Shape)
		}
		if got, want := httpCanonJSON(t, o.Data), httpCanonJSON(t, []byte(c.json)); got != want {
			t.Errorf("%s: data %s, want %s", c.dtype, got, want)
		}
	}
}

// httpInferBinaryEveryDtype is the case "infer binary every dtype" of TestHTTPEndpoints.
func httpInferBinaryEveryDtype(t *testing.T, e httpSuite) {
	s := e.s
	var inputs []map[string]any
	var blobs [][]byte
	for _, c := range httpDtypeCases {
		inputs = append(inputs, map[string]any{"name": httpIOName("INPUT", c.dtype), "datatype": c.dtype,
			"shape": []int64{c.n}, "parameters": map[string]any{"binary_data_size": len(c.blob)}})
		blobs = append(blobs, c.blob)
	}
	code, h, body := s.httpInferBinary("identity_all", map[string]any{
		"inputs": inputs, "parameters": map[string]any{"binary_data_output": true}}, blobs...)
	r := httpDecodeInfer(t, code, h, body)
	for _, c := range httpDtypeCases {
		name := httpIOName("OUTPUT", c.dtype)
		o := r.output(t, name)
		if o.Datatype != c.dtype || !slices.Equal(o.Shape, []int64{c.n}) {
			t.Errorf("%s: datatype %s shape %v", c.dtype, o.Datatype, o.Shape)
		}
		if !bytes.Equal(r.Blobs[name], c.blob) {
			t.Errorf("%s: got bytes %x, want %x", c.dtype, r.Blobs[name], c.blob)
		}
	}
}

// httpRequestedOutputsMixBinaryAndJSON is the case "requested outputs mix binary and JSON" of TestHTTPEndpoints.
func httpRequestedOutputsMixBinaryAndJSON(t *testing.T, e httpSuite) {
	s := e.s
	in := ipctest.FP32(1, 2, 3, 4)
	one := ipctest.FP32(1, 1, 1, 1)
	hdr := map[string]any{
		"inputs": []map[string]any{
			{"name": "INPUT0", "shape": []int{4}, "datatype": "FP32", "parameters": map[string]any{"binary_data_size": 16}},
			{"name": "INPUT1", "shape": []int{4}, "datatype": "FP32", "parameters": map[string]any{"binary_data_size": 16}},
		},
		"outputs": []map[string]any{{"name": "OUTPUT1", "parameters": map[string]any{"binary_data": true}}},
	}
	code, h, body := s.httpInferBinary("add_sub", hdr, in, one)
	r := httpDecodeInfer(t, code, h, body)
	if len(r.Outputs) != 1 || r.Outputs[0].Name != "OUTPUT1" {
		t.Fatalf("outputs = %+v, want only OUTPUT1", r.Outputs)
	}
	if want := ipctest.FP32(0, 1, 2, 3); !bytes.Equal(r.Blobs["OUTPUT1"], want) {
		t.Errorf("OUTPUT1 = %x, want %x", r.Blobs["OUTPUT1"], want)
	}
	// Binary inputs, one JSON output and one binary output.
	hdr["outputs"] = []map[string]any{{"name": "OUTPUT0"}, {"name": "OUTPUT1", "parameters": map[string]any{"binary_data": true}}}
	code, h, body = s.httpInferBinary("add_sub", hdr, in, one)
	r = httpDecodeInfer(t, code, h, body)
	if o := r.output(t, "OUTPUT0"); httpCanonJSON(t, o.Data) != "[2,3,4,5]" {
		t.Errorf("OUTPUT0 JSON data = %s", o.Data)
	}
	if len(r.Blobs) != 1 || len(r.Blobs["OUTPUT1"]) != 16 {
		t.Errorf("blobs = %v, want only OUTPUT1", r.Blobs)
	}
	// JSON request, binary_data_output for all outputs.
	req := httpAddSubJSON([]float32{1, 2, 3, 4}, []float32{4, 3, 2, 1})
	req["parameters"] = map[string]any{"binary_data_output": true}
	b, _ := json.Marshal(req)
	code, h, body = s.do("POST", "/v2/models/add_sub/infer", b)
	r = httpDecodeInfer(t, code, h, body)
	if want := ipctest.FP32(5, 5, 5, 5); !bytes.Equal(r.Blobs["OUTPUT0"], want) {
		t.Errorf("binary_data_output OUTPUT0 = %x, want %x", r.Blobs["OUTPUT0"], want)
	}
	if len(r.Blobs) != 2 {
		t.Errorf("binary_data_output: blobs %v, want both outputs", r.Blobs)
	}
}

// httpRawBinaryRequest is the case "raw binary request" of TestHTTPEndpoints.
func httpRawBinaryRequest(t *testing.T, e httpSuite) {
	s := e.s
	in := ipctest.FP32(1.5, -1, 8)
	code, h, body := s.do("POST", "/v2/models/e2e_echo/infer", in,
		"Inference-Header-Content-Length", "0", "Content-Type", "application/octet-stream")
	r := httpDecodeInfer(t, code, h, body)
	if h.Get("Inference-Header-Content-Length") == "" {
		t.Errorf("raw request answered without binary outputs")
	}
	if o := r.output(t, "OUTPUT0"); !slices.Equal(o.Shape, []int64{3}) || !bytes.Equal(r.Blobs["OUTPUT0"], in) {
		t.Errorf("OUTPUT0 shape %v bytes %x, want [3] %x", o.Shape, r.Blobs["OUTPUT0"], in)
	}
	// add_sub has two inputs: a raw body cannot name which.
	code, _, body = s.do("POST", "/v2/models/add_sub/infer", in, "Inference-Header-Content-Length", "0")
	if code != 400 {
		t.Errorf("raw request to a two-input model: %d %s, want 400", code, body)
	}
}

// httpRequestAndResponseParameters is the case "request and response parameters" of TestHTTPEndpoints.
func httpRequestAndResponseParameters(t *testing.T, e httpSuite) {
	s := e.s
	req := map[string]any{
		"id":         "p1",
		"parameters": map[string]any{"tag": "blue", "count": 3, "flag": true},
		"inputs":     []map[string]any{{"name": "INPUT0", "shape": []int{2}, "datatype": "FP32", "data": []float32{1, 2}}},
	}
	code, body := s.httpInferJSON("e2e_echo", req)
	r := httpDecodeInfer(t, code, http.Header{"Content-Type": {"application/json"}}, body)
	p := r.Parameters
	if r.ID != "p1" || p["tag"] != "blue" || fmt.Sprint(p["count"]) != "3" || p["flag"] != true || p["echoed_by"] != "e2e_echo" {
		t.Errorf("id %q parameters %v", r.ID, p)
	}
	req["parameters"] = map[string]any{"triton_x": 1}
	code, body = s.httpInferJSON("e2e_echo", req)
	if code != 400 || !strings.Contains(httpErrorText(t, body), "parameter keys starting with 'triton_' are reserved") {
		t.Errorf("reserved parameter: %d %s", code, body)
	}
}

// httpBadRequests is the case "bad requests" of TestHTTPEndpoints.
func httpBadRequests(t *testing.T, e httpSuite) {
	s := e.s
	good := func(n0, n1 int) map[string]any {
		return map[string]any{"inputs": []map[string]any{
			{"name": "INPUT0", "shape": []int{4}, "datatype": "FP32", "parameters": map[string]any{"binary_data_size": n0}},
			{"name": "INPUT1", "shape": []int{4}, "datatype": "FP32", "parameters": map[string]any{"binary_data_size": n1}},
		}}
	}
	hdr, _ := json.Marshal(good(16, 16))
	blob16 := make([]byte, 16)
	bin := slices.Concat(hdr, blob16, blob16)
	hlen := strconv.Itoa(len(hdr))
	bigBody, bigHdr := httpBinaryBody(t, map[string]any{"inputs": []map[string]any{{"name": "INPUT_UINT8",
		"shape": []int{maxInput + 1}, "datatype": "UINT8", "parameters": map[string]any{"binary_data_size": maxInput + 1}}}},
		make([]byte, maxInput+1))
	wrong := func(f func(in map[string]any)) []byte {
		req := httpAddSubJSON([]float32{1, 2, 3, 4}, []float32{1, 2, 3, 4})
		f(req["inputs"].([]map[string]any)[0])
		b, _ := json.Marshal(req)
		return b
	}
	cases := []struct {
		name   string
		path   string
		body   []byte
		header []string
		code   int
		want   string
	}{
		{"malformed JSON", "/v2/models/add_sub/infer", []byte(`{"inputs":[{"name":"INPUT0"`), nil, 400,
			"failed to parse the request JSON buffer"},
		{"not an object", "/v2/models/add_sub/infer", []byte(`[1,2]`), nil, 500, "attempt to access non-existing object member"},
		{"wrong shape", "/v2/models/add_sub/infer",
			wrong(func(in map[string]any) { in["shape"], in["data"] = []int{5}, []float32{1, 2, 3, 4, 5} }), nil, 400,
			"unexpected shape for input 'INPUT0' for model 'add_sub'. Expected [4], got [5]"},
		{"wrong dtype", "/v2/models/add_sub/infer",
			wrong(func(in map[string]any) { in["datatype"] = "INT32" }), nil, 400,
			"inference input 'INPUT0' data-type is 'INT32', but model 'add_sub' expects 'FP32'"},
		{"data does not fill the shape", "/v2/models/add_sub/infer",
			wrong(func(in map[string]any) { in["data"] = []float32{1, 2, 3} }), nil, 500, "'data'"},
		// Triton's JSON accessor errors are INTERNAL, hence 500.
		{"negative dim", "/v2/models/add_sub/infer",
			wrong(func(in map[string]any) { in["shape"] = []int{-4} }), nil, 500, "shape"},
		{"FP16 as JSON", "/v2/models/identity_all/infer",
			[]byte(`{"inputs":[{"name":"INPUT_FP16","shape":[1],"datatype":"FP16","data":[1]}]}`), nil, 400,
			"receiving FP16 data via JSON is not supported"},
		{"unknown input", "/v2/models/add_sub/infer",
			wrong(func(in map[string]any) { in["name"] = "NOPE" }), nil, 400, "NOPE"},
		{"wrong binary byte size", "/v2/models/add_sub/infer",
			slices.Concat(httpMustJSON(t, good(12, 16)), make([]byte, 28)),
			[]string{"Inference-Header-Content-Length", strconv.Itoa(len(httpMustJSON(t, good(12, 16))))}, 400, "INPUT0"},
		{"truncated binary body", "/v2/models/add_sub/infer", bin[:len(bin)-8],
			[]string{"Inference-Header-Content-Length", hlen}, 400,
			"unexpected size for input 'INPUT1', expecting 8 additional bytes for model 'add_sub'"},
		{"binary body with extra bytes", "/v2/models/add_sub/infer", append(slices.Clip(bin), 1, 2),
			[]string{"Inference-Header-Content-Length", hlen}, 400,
			"unexpected additional input data for model 'add_sub'"},
		{"header length past the end", "/v2/models/add_sub/infer", bin,
			[]string{"Inference-Header-Content-Length", strconv.Itoa(len(bin) + 1)}, 400,
			fmt.Sprintf("inference header size should be in range (0, %d), got: %d", len(bin), len(bin)+1)},
		{"header length not a number", "/v2/models/add_sub/infer", bin,
			[]string{"Inference-Header-Content-Length", "abc"}, 400,
			"Unable to parse Inference-Header-Content-Length, got: abc"},
		{"body over the limit", "/v2/models/identity_all/infer", bigBody,
			[]string{"Inference-Header-Content-Length", strconv.Itoa(bigHdr)}, 400, "exceeds the maximum"},
		{"unknown model", "/v2/models/no_such_model/infer", wrong(func(map[string]any) {}), nil, 400,
			"Request for unknown model: 'no_such_model' is not found"},
		{"unknown version", "/v2/models/add_sub/versions/7/infer", wrong(func(map[string]any) {}), nil, 404,
			"Request for unknown model: 'add_sub' version 7 is not found"},
		{"model that failed to load", "/v2/models/init_fails/infer", wrong(func(map[string]any) {}), nil, 503,
			"init_fails"},
		{"GET on infer", "/v2/models/add_sub/infer", nil, nil, 405, "Method Not Allowed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			method := "POST"
			if c.code == 405 {
				method = "GET"
			}
			code, h, body := s.do(method, c.path, c.body, c.header...)
			if code != c.code {
				t.Errorf("status %d, want %d: %s", code, c.code, body)
			}
			if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("error Content-Type %q", ct)
			}
			msg := httpErrorText(t, body)
			if msg == "" || !strings.Contains(msg, c.want) {
				t.Errorf("error %q, want it to contain %q", msg, c.want)
			}
		})
	}
	// None of that hurt the server: it is live and still infers.
	if code, _, _ := s.do("GET", "/v2/health/live", nil); code != 200 {
		t.Errorf("live after bad requests: %d", code)
	}
	code, body := s.httpInferJSON("add_sub", httpAddSubJSON([]float32{1, 2, 3, 4}, []float32{1, 1, 1, 1}))
	r := httpDecodeInfer(t, code, http.Header{"Content-Type": {"application/json"}}, body)
	if o := r.output(t, "OUTPUT0"); httpCanonJSON(t, o.Data) != "[2,3,4,5]" {
		t.Errorf("infer after bad requests: %s", body)
	}
}

// httpStats is the case "stats" of TestHTTPEndpoints.
func httpStats(t *testing.T, e httpSuite) {
	s := e.s
	var st struct {
		ModelStats []struct {
			Name           string `json:"name"`
			Version        string `json:"version"`
			LastInference  int64  `json:"last_inference"`
			InferenceCount int64  `json:"inference_count"`
			ExecutionCount int64  `json:"execution_count"`
			InferenceStats map[string]struct {
				Count int64 `json:"count"`
				NS    int64 `json:"ns"`
			} `json:"inference_stats"`
		} `json:"model_stats"`
	}
	s.getJSON("/v2/models/add_sub/stats", &st)
	if len(st.ModelStats) != 1 {
		t.Fatalf("add_sub stats: %+v", st)
	}
	m := st.ModelStats[0]
	// Earlier subtests ran 4 good add_sub inferences.
	if m.Name != "add_sub" || m.Version != "1" || m.InferenceCount < 4 || m.ExecutionCount < 4 || m.LastInference == 0 {
		t.Errorf("add_sub stats = %+v", m)
	}
	if ok := m.InferenceStats["success"]; ok.Count != m.InferenceCount || ok.NS <= 0 {
		t.Errorf("success = %+v, inference_count %d", ok, m.InferenceCount)
	}
	s.getJSON("/v2/models/stats", &st)
	if len(st.ModelStats) < 3 {
		t.Errorf("all-model stats have %d entries", len(st.ModelStats))
	}
	code, _, body := s.do("GET", "/v2/models/no_such_model/stats", nil)
	if code != 400 || !strings.Contains(httpErrorText(t, body), "no_such_model") {
		t.Errorf("unknown model stats: %d %s", code, body)
	}
}

// httpMetrics is the case "metrics" of TestHTTPEndpoints.
func httpMetrics(t *testing.T, e httpSuite) {
	s := e.s
	text, ct := s.scrape()
	if !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("metrics Content-Type %q, want text/plain", ct)
	}
	for _, want := range []string{
		`nv_inference_request_success{model="add_sub",version="1"}`,
		`nv_inference_count{model="add_sub",version="1"}`,
		`nv_inference_request_failure{`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// The HTTP port does not serve metrics.
	if code, _, _ := s.do("GET", "/metrics", nil); code != 404 {
		t.Errorf("/metrics on the HTTP port: %d, want 404", code)
	}
}

// httpStubs is the case "stubs" of TestHTTPEndpoints.
func httpStubs(t *testing.T, e httpSuite) {
	s := e.s
	var all []modelStubs
	s.getJSON("/v2/stubs", &all)
	seen := map[string]bool{}
	for _, m := range all {
		seen[m.Model] = true
		if m.State == "READY" && (len(m.Stubs) != 1 || m.Stubs[0].PID <= 0 || m.Stubs[0].Kind != "python" || m.Stubs[0].Restarts != 0) {
			t.Errorf("%s stubs = %+v", m.Model, m.Stubs)
		}
	}
	for _, m := range []string{"add_sub", "identity_all", "e2e_echo"} {
		if !seen[m] {
			t.Errorf("/v2/stubs lacks %s", m)
		}
	}
	s.getJSON("/v2/models/add_sub/stubs", &all)
	if len(all) != 1 || all[0].Model != "add_sub" || all[0].Stubs[0].Instance != "add_sub_0_0" {
		t.Errorf("add_sub stubs = %+v", all)
	}
	code, _, body := s.do("GET", "/v2/models/no_such_model/stubs", nil)
	if code == 200 {
		t.Errorf("stubs of an unknown model: %d %s", code, body)
	}
}
