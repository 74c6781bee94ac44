package server

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

type testServer struct {
	s       *Server
	b       *testBackend
	url     string
	client  *http.Client
	metrics string
}

func newTestServer(t *testing.T, opts Options) *testServer {
	t.Helper()
	b := newTestBackend()
	s, err := New(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(s.HTTPHandler())
	t.Cleanup(api.Close)
	met := httptest.NewServer(s.MetricsHandler())
	t.Cleanup(met.Close)
	client := api.Client()
	client.Timeout = 10 * time.Second
	return &testServer{s: s, b: b, url: api.URL, client: client, metrics: met.URL}
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (ts *testServer) do(t *testing.T, method, path string, body []byte, header map[string]string) reply {
	t.Helper()
	return ts.doURL(t, method, ts.url+path, body, header)
}

func (ts *testServer) doURL(t *testing.T, method, url string, body []byte, header map[string]string) reply {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, b}
}

func errorBody(msg string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(map[string]string{"error": msg})
	return strings.TrimSuffix(buf.String(), "\n")
}

func TestRouting(t *testing.T) {
	ts := newTestServer(t, Options{Version: "9.9.9", Extensions: []string{"binary_tensor_data", "statistics"}})
	ts.b.stats = sampleStats()
	tests := []struct {
		name   string
		method string
		path   string
		status int
		body   string // exact body; "*" to skip the check
	}{
		{"server metadata", "GET", "/v2", 200, `{"name":"triton","version":"9.9.9","extensions":["binary_tensor_data","statistics"]}`},
		{"server metadata wrong method", "POST", "/v2", 405, errorBody("Method Not Allowed")},
		{"live", "GET", "/v2/health/live", 200, ""},
		{"ready", "GET", "/v2/health/ready", 200, ""},
		{"health wrong method", "POST", "/v2/health/ready", 405, errorBody("Method Not Allowed")},
		{"unknown path", "GET", "/v2/nothing", 404, errorBody("Not Found")},
		{"unknown health", "GET", "/v2/health/dead", 404, errorBody("Not Found")},
		{"trailing slash", "GET", "/v2/", 404, errorBody("Not Found")},
		{"non-digit version", "GET", "/v2/models/add_sub/versions/x", 404, errorBody("Not Found")},
		{"versions without number", "GET", "/v2/models/add_sub/versions", 404, errorBody("Not Found")},
		{"unknown model action", "GET", "/v2/models/add_sub/explode", 404, errorBody("Not Found")},
		{"trace with version", "GET", "/v2/models/add_sub/versions/1/trace/setting", 404, errorBody("Not Found")},
		{"model trace", "GET", "/v2/models/add_sub/trace/setting", 200, `{"trace_level":["OFF"],"trace_rate":"1000","trace_count":"-1","log_frequency":"0","trace_file":"","trace_mode":"triton"}`},
		{"global trace", "POST", "/v2/trace/setting", 200, `{"trace_level":["OFF"],"trace_rate":"1000","trace_count":"-1","log_frequency":"0","trace_file":"","trace_mode":"triton"}`},
		{"unknown model trace", "GET", "/v2/models/nope/trace/setting", 400, errorBody("Request for unknown model : nope")},
		{"trace wrong method", "DELETE", "/v2/trace/setting", 405, errorBody("Method Not Allowed")},
		{"infer wrong method", "GET", "/v2/models/add_sub/infer", 405, errorBody("Method Not Allowed")},
		{"generate wrong method", "GET", "/v2/models/add_sub/generate", 405, errorBody("Method Not Allowed")},
		{"model ready", "GET", "/v2/models/add_sub/ready", 200, ""},
		{"model version ready", "GET", "/v2/models/add_sub/versions/1/ready", 200, ""},
		{"model version not ready", "GET", "/v2/models/add_sub/versions/2/ready", 400, errorBody("Model version not ready")},
		{"unknown model not ready", "GET", "/v2/models/nope/ready", 400, errorBody("Model version not ready")},
		{"ready wrong method", "POST", "/v2/models/add_sub/ready", 405, errorBody("Method Not Allowed")},
		{"model metadata", "GET", "/v2/models/add_sub", 200,
			`{"name":"add_sub","versions":["1"],"platform":"python","inputs":[{"name":"INPUT0","datatype":"FP32","shape":[4]},{"name":"INPUT1","datatype":"FP32","shape":[4]}],` +
				`"outputs":[{"name":"OUTPUT0","datatype":"FP32","shape":[4]},{"name":"OUTPUT1","datatype":"FP32","shape":[4]}]}`},
		{"batched metadata", "GET", "/v2/models/batched/versions/1", 200,
			`{"name":"batched","versions":["1"],"platform":"python","inputs":[{"name":"INPUT0","datatype":"FP32","shape":[-1,-1]}],"outputs":[{"name":"OUTPUT0","datatype":"FP32","shape":[-1,-1]}]}`},
		{"unknown model", "GET", "/v2/models/nope", 400, errorBody("Request for unknown model: 'nope' is not found")},
		{"unloaded model", "GET", "/v2/models/unloaded", 404, errorBody("Request for unknown model: 'unloaded' is not found")},
		{"percent-decoded name", "GET", "/v2/models/a%2Fb%20c", 400, errorBody("Request for unknown model: 'a/b c' is not found")},
		{"huge version", "GET", "/v2/models/add_sub/versions/99999999999999999999", 400,
			errorBody("failed to get model version from specified version string '99999999999999999999' (details: stol), version should be an integral value > 0")},
		{"model config", "GET", "/v2/models/add_sub/config", 200, "*"},
		{"config unknown model", "GET", "/v2/models/nope/config", 400, errorBody("Request for unknown model: 'nope' is not found")},
		{"all stats", "GET", "/v2/models/stats", 200,
			`{"model_stats":[{"name":"add_sub","version":"1","last_inference":1700000000123,"inference_count":12,"execution_count":7,` +
				`"inference_stats":{"success":{"count":10,"ns":5000000},"fail":{"count":2,"ns":1000000},"queue":{"count":10,"ns":300000},` +
				`"compute_input":{"count":10,"ns":100000},"compute_infer":{"count":10,"ns":4000000},"compute_output":{"count":10,"ns":200000},` +
				`"cache_hit":{"count":0,"ns":0},"cache_miss":{"count":0,"ns":0}},"response_stats":{},"batch_stats":[` +
				`{"batch_size":1,"compute_input":{"count":0,"ns":0},"compute_infer":{"count":4,"ns":3000000},"compute_output":{"count":0,"ns":0}},` +
				`{"batch_size":2,"compute_input":{"count":0,"ns":0},"compute_infer":{"count":3,"ns":1000000},"compute_output":{"count":0,"ns":0}}],"memory_usage":[]}]}`},
		{"model stats none", "GET", "/v2/models/identity/versions/1/stats", 200, `{"model_stats":[]}`},
		{"stats unknown model", "GET", "/v2/models/nope/stats", 400, errorBody("Request for unknown model: 'nope' is not found")},
		{"stats wrong method", "POST", "/v2/models/stats", 405, errorBody("Method Not Allowed")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ts.do(t, tc.method, tc.path, nil, nil)
			if r.status != tc.status {
				t.Fatalf("status = %d, want %d (body %s)", r.status, tc.status, r.body)
			}
			if tc.body != "*" && string(r.body) != tc.body {
				t.Fatalf("body = %s\nwant %s", r.body, tc.body)
			}
			if len(r.body) > 0 && r.header.Get("Content-Type") != "application/json" {
				t.Fatalf("Content-Type = %q, want application/json", r.header.Get("Content-Type"))
			}
		})
	}
}

func TestHealthDown(t *testing.T) {
	ts := newTestServer(t, Options{})
	ts.b.live.Store(false)
	ts.b.ready.Store(false)
	for _, p := range []string{"/v2/health/live", "/v2/health/ready"} {
		if r := ts.do(t, "GET", p, nil, nil); r.status != 400 || len(r.body) != 0 {
			t.Errorf("%s: status %d body %q, want 400 and no body", p, r.status, r.body)
		}
	}
}

func TestModelConfigJSON(t *testing.T) {
	ts := newTestServer(t, Options{})
	r := ts.do(t, "GET", "/v2/models/batched/config", nil, nil)
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var cfg struct {
		Name         string `json:"name"`
		MaxBatchSize int    `json:"max_batch_size"`
		Input        []struct {
			Name     string  `json:"name"`
			DataType string  `json:"data_type"`
			Dims     []int64 `json:"dims"`
		} `json:"input"`
	}
	if err := json.Unmarshal(r.body, &cfg); err != nil {
		t.Fatalf("config is not JSON: %v: %s", err, r.body)
	}
	if cfg.Name != "batched" || cfg.MaxBatchSize != 8 || len(cfg.Input) != 1 || cfg.Input[0].DataType != "TYPE_FP32" || len(cfg.Input[0].Dims) != 1 || cfg.Input[0].Dims[0] != -1 {
		t.Fatalf("config = %+v (from %s)", cfg, r.body)
	}
}

func TestInferJSON(t *testing.T) {
	ts := newTestServer(t, Options{})
	body := `{"id":"42","inputs":[{"name":"INPUT0","shape":[4],"datatype":"FP32","data":[1,2,3,4]},` +
		`{"name":"INPUT1","shape":[4],"datatype":"FP32","data":[0.5,0.5,0.5,0.5]}]}`
	r := ts.do(t, "POST", "/v2/models/add_sub/infer", []byte(body), nil)
	want := `{"id":"42","model_name":"add_sub","model_version":"1","outputs":[` +
		`{"name":"OUTPUT0","datatype":"FP32","shape":[4],"data":[1.5,2.5,3.5,4.5]},` +
		`{"name":"OUTPUT1","datatype":"FP32","shape":[4],"data":[0.5,1.5,2.5,3.5]}]}`
	if r.status != 200 || string(r.body) != want {
		t.Fatalf("status %d body %s\nwant %s", r.status, r.body, want)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q", ct)
	}
	if r.header.Get(hdrInferHeaderLength) != "" {
		t.Fatalf("a JSON-only reply must not carry %s", hdrInferHeaderLength)
	}
	if got, want := ts.b.released.Load(), ts.b.responses.Load(); got != want || got != 1 {
		t.Fatalf("released %d of %d responses", got, want)
	}
}

// splitBinaryReply splits a binary-extension reply into its JSON header
// and the binary tail.
func splitBinaryReply(t *testing.T, r reply) (map[string]any, []byte) {
	t.Helper()
	n, err := strconv.Atoi(r.header.Get(hdrInferHeaderLength))
	if err != nil || n > len(r.body) {
		t.Fatalf("bad %s %q for a %d-byte body", hdrInferHeaderLength, r.header.Get(hdrInferHeaderLength), len(r.body))
	}
	var hdr map[string]any
	if err := json.Unmarshal(r.body[:n], &hdr); err != nil {
		t.Fatalf("header is not JSON: %v: %s", err, r.body[:n])
	}
	return hdr, r.body[n:]
}

func TestInferBinary(t *testing.T) {
	ts := newTestServer(t, Options{})
	hdr := []byte(`{"inputs":[{"name":"INPUT0","shape":[4],"datatype":"INT32","parameters":{"binary_data_size":16}},` +
		`{"name":"INPUT1","shape":[4],"datatype":"INT32","parameters":{"binary_data_size":16}}],` +
		`"outputs":[{"name":"OUTPUT1","parameters":{"binary_data":true}},{"name":"OUTPUT0","parameters":{"binary_data":true}}]}`)
	body := append(append(append([]byte{}, hdr...), i32(10, 20, 30, 40)...), i32(1, 2, 3, 4)...)
	r := ts.do(t, "POST", "/v2/models/add_sub/infer", body, map[string]string{
		hdrInferHeaderLength: strconv.Itoa(len(hdr)),
		"Content-Type":       "application/octet-stream",
	})
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/octet-stream" {
		t.Fatalf("Content-Type = %q", ct)
	}
	js, tail := splitBinaryReply(t, r)
	outs := js["outputs"].([]any)
	if len(outs) != 2 {
		t.Fatalf("outputs = %v", outs)
	}
	// Binary data follows in the order of the response's outputs.
	want := append(i32(11, 22, 33, 44), i32(9, 18, 27, 36)...)
	if !bytes.Equal(tail, want) {
		t.Fatalf("binary tail = %x, want %x", tail, want)
	}
	for _, o := range outs {
		p := o.(map[string]any)["parameters"].(map[string]any)
		if p["binary_data_size"].(float64) != 16 {
			t.Fatalf("output %v: binary_data_size %v", o, p["binary_data_size"])
		}
	}
	if got := ts.b.lastRequest(); len(got.Outputs) != 2 || got.Outputs[0].Name != "OUTPUT1" {
		t.Fatalf("requested outputs = %+v", got.Outputs)
	}
	if ts.b.released.Load() != 1 {
		t.Fatalf("response not released")
	}
}

func TestInferBinaryDataOutputDefault(t *testing.T) {
	ts := newTestServer(t, Options{})
	body := `{"parameters":{"binary_data_output":true},"inputs":[{"name":"INPUT0","shape":[2],"datatype":"BYTES","data":["ab","c"]}],` +
		`"outputs":[{"name":"OUTPUT0"}]}`
	r := ts.do(t, "POST", "/v2/models/identity/infer", []byte(body), nil)
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	_, tail := splitBinaryReply(t, r)
	if !bytes.Equal(tail, bytesTensor("ab", "c")) {
		t.Fatalf("tail = %q", tail)
	}
}

func TestInferRaw(t *testing.T) {
	ts := newTestServer(t, Options{})
	tests := []struct {
		model string
		body  []byte
		shape []int64
		tail  []byte
	}{
		{"identity", ipctest.FP32(1, 2, 3), []int64{3}, ipctest.FP32(1, 2, 3)},
		{"batched", ipctest.FP32(4, 5), []int64{1, 2}, ipctest.FP32(4, 5)},
		{"bytes_raw", []byte("hello"), []int64{1}, bytesTensor("hello")},
	}
	for _, tc := range tests {
		t.Run(tc.model, func(t *testing.T) {
			r := ts.do(t, "POST", "/v2/models/"+tc.model+"/infer", tc.body, map[string]string{hdrInferHeaderLength: "0"})
			if r.status != 200 {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			js, tail := splitBinaryReply(t, r)
			if !bytes.Equal(tail, tc.tail) {
				t.Fatalf("tail = %x, want %x", tail, tc.tail)
			}
			shape := js["outputs"].([]any)[0].(map[string]any)["shape"].([]any)
			if len(shape) != len(tc.shape) {
				t.Fatalf("shape %v, want %v", shape, tc.shape)
			}
			for i, d := range shape {
				if int64(d.(float64)) != tc.shape[i] {
					t.Fatalf("shape %v, want %v", shape, tc.shape)
				}
			}
		})
	}
	r := ts.do(t, "POST", "/v2/models/add_sub/infer", ipctest.FP32(1), map[string]string{hdrInferHeaderLength: "0"})
	if want := errorBody("Raw request must only have 1 input (found 1) to be deduced but got 2 inputs in 'add_sub' model configuration"); r.status != 400 || string(r.body) != want {
		t.Fatalf("raw request to a two-input model: %d %s", r.status, r.body)
	}
}

func gzipped(t *testing.T, b []byte) []byte {
	return compressed(t, b, func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) })
}

func deflated(t *testing.T, b []byte) []byte {
	return compressed(t, b, func(w io.Writer) io.WriteCloser { return zlib.NewWriter(w) })
}

// compressed is b written through the compressor that newWriter makes.
func compressed(t *testing.T, b []byte, newWriter func(io.Writer) io.WriteCloser) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := newWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestInferCompression(t *testing.T) {
	ts := newTestServer(t, Options{})
	// The test transport must not decompress on its own.
	ts.client.Transport.(*http.Transport).DisableCompression = true
	body := []byte(`{"inputs":[{"name":"INPUT0","shape":[2],"datatype":"INT64","data":[7,-8]}]}`)
	want := `{"model_name":"identity","model_version":"1","outputs":[{"name":"OUTPUT0","datatype":"INT64","shape":[2],"data":[7,-8]}]}`
	tests := []struct {
		name        string
		body        []byte
		encoding    string
		accept      string
		respEncoded string
	}{
		{"gzip in, gzip out", gzipped(t, body), "gzip", "gzip", "gzip"},
		{"deflate in, deflate out", deflated(t, body), "deflate", "deflate", "deflate"},
		{"identity in, weighted choice", body, "identity", "deflate;q=0.5, gzip;q=0.8", "gzip"},
		{"plain", body, "", "", ""},
		{"identity preferred", body, "", "gzip;q=0.1, identity", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := map[string]string{}
			if tc.encoding != "" {
				h["Content-Encoding"] = tc.encoding
			}
			if tc.accept != "" {
				h["Accept-Encoding"] = tc.accept
			}
			r := ts.do(t, "POST", "/v2/models/identity/infer", tc.body, h)
			if r.status != 200 {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			if got := r.header.Get("Content-Encoding"); got != tc.respEncoded {
				t.Fatalf("Content-Encoding = %q, want %q", got, tc.respEncoded)
			}
			plain := r.body
			var zr io.ReadCloser
			var err error
			switch tc.respEncoded {
			case "gzip":
				zr, err = gzip.NewReader(bytes.NewReader(r.body))
			case "deflate":
				zr, err = zlib.NewReader(bytes.NewReader(r.body))
			}
			if err != nil {
				t.Fatal(err)
			}
			if zr != nil {
				if plain, err = io.ReadAll(zr); err != nil {
					t.Fatal(err)
				}
			}
			if string(plain) != want {
				t.Fatalf("body = %s, want %s", plain, want)
			}
		})
	}
	r := ts.do(t, "POST", "/v2/models/identity/infer", body, map[string]string{"Content-Encoding": "br"})
	if r.status != 400 || string(r.body) != errorBody("Unsupported compression type") || r.header.Get("Accept-Encoding") != "gzip, deflate" {
		t.Fatalf("unsupported encoding: %d %s %v", r.status, r.body, r.header)
	}
	r = ts.do(t, "POST", "/v2/models/identity/infer", []byte("not gzip"), map[string]string{"Content-Encoding": "gzip"})
	if r.status != 400 || !strings.Contains(string(r.body), "failed to decompress the request body (gzip)") {
		t.Fatalf("corrupt gzip: %d %s", r.status, r.body)
	}
}

func TestInferErrors(t *testing.T) {
	ts := newTestServer(t, Options{MaxInputSize: 1024})
	okBody := `{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","data":[1]}]}`
	fp16Hdr := `{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP16","parameters":{"binary_data_size":2}}]}`
	tests := []struct {
		name   string
		model  string
		body   []byte
		header map[string]string
		status int
		err    string
	}{
		{"decoupled", "decoupled", []byte(okBody), nil, 501, "HTTP end point doesn't support models with decoupled transaction policy"},
		{"unknown model", "nope", []byte(okBody), nil, 400, "Request for unknown model: 'nope' is not found"},
		{"not loaded", "unloaded", []byte(okBody), nil, 404, "Request for unknown model: 'unloaded' is not found"},
		{"too large", "identity", bytes.Repeat([]byte(" "), 1025), nil, 400,
			"request JSON size of 1025 bytes exceeds the maximum allowed input size of 1024 bytes. Use --http-max-input-size to increase the limit."},
		{"raw too large", "identity", bytes.Repeat([]byte{0}, 1028), map[string]string{hdrInferHeaderLength: "0"}, 400,
			"Raw input has a byte_size (1028 bytes) that exceeds the maximum allowed value of 1024 bytes. Use --http-max-input-size to increase the limit."},
		{"inflated too large", "identity", gzipped(t, bytes.Repeat([]byte(" "), 4096)), map[string]string{"Content-Encoding": "gzip"}, 400,
			"Decompressed data size exceeds the maximum allowed value of 1024 bytes. Use --http-max-input-size to increase the limit."},
		{"header length not a number", "identity", []byte(okBody), map[string]string{hdrInferHeaderLength: "abc"}, 400,
			"Unable to parse Inference-Header-Content-Length, got: abc"},
		{"header length past the end", "identity", []byte(okBody), map[string]string{hdrInferHeaderLength: "1000"}, 400,
			"inference header size should be in range (0, " + strconv.Itoa(len(okBody)) + "), got: 1000"},
		{"malformed json", "identity", []byte(`{"inputs":[`), nil, 400, "failed to parse the request JSON buffer: Invalid value. at 11"},
		{"backend error", "add_sub", []byte(okBody), nil, 400, "expected 2 inputs but got 1 inputs for model 'add_sub'"},
		{"fp16 output as json", "identity", append([]byte(fp16Hdr), 0, 0x3c),
			map[string]string{hdrInferHeaderLength: strconv.Itoa(len(fp16Hdr))}, 400, "sending FP16 data via JSON is not supported. Please use the binary data format for output"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ts.do(t, "POST", "/v2/models/"+tc.model+"/infer", tc.body, tc.header)
			if r.status != tc.status || string(r.body) != errorBody(tc.err) {
				t.Fatalf("got %d %s\nwant %d %s", r.status, r.body, tc.status, errorBody(tc.err))
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("Content-Type = %q", ct)
			}
		})
	}
	if got, want := ts.b.released.Load(), ts.b.responses.Load(); got != want {
		t.Fatalf("released %d of %d responses", got, want)
	}
}

func TestInferParametersAndShm(t *testing.T) {
	ts := newTestServer(t, Options{})
	body := `{"id":"x","parameters":{"sequence_id":12,"sequence_start":true,"sequence_end":true,"priority":1,"timeout":100,"zeta":"z","alpha":3},` +
		`"inputs":[{"name":"INPUT0","shape":[2],"datatype":"FP32","parameters":{"shared_memory_region":"in","shared_memory_byte_size":8}}],` +
		`"outputs":[{"name":"OUTPUT0","parameters":{"shared_memory_region":"out","shared_memory_offset":8,"shared_memory_byte_size":8}}]}`
	r := ts.do(t, "POST", "/v2/models/identity/infer", []byte(body), nil)
	want := `{"id":"x","model_name":"identity","model_version":"1","parameters":{"alpha":3,"zeta":"z"},` +
		`"outputs":[{"name":"OUTPUT0","datatype":"FP32","shape":[2]}]}`
	if r.status != 200 || string(r.body) != want {
		t.Fatalf("status %d body %s\nwant %s", r.status, r.body, want)
	}
	got := ts.b.lastRequest()
	if got.CorrelationID.Uint != 12 || got.Flags != backendapi.FlagSequenceStart|backendapi.FlagSequenceEnd ||
		got.Priority != 1 || got.Timeout != 100*time.Microsecond {
		t.Fatalf("request = %+v", got)
	}
	if in := got.Inputs[0]; in.SharedMemory == nil || *in.SharedMemory != (backendapi.SharedMemoryRef{Region: "in", ByteSize: 8}) {
		t.Fatalf("input shm = %+v", in.SharedMemory)
	}
	if out := got.Outputs[0]; out.SharedMemory == nil || *out.SharedMemory != (backendapi.SharedMemoryRef{Region: "out", Offset: 8, ByteSize: 8}) {
		t.Fatalf("output shm = %+v", out.SharedMemory)
	}
}
