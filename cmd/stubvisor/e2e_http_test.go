package main

// The HTTP end-to-end suite: the built binary on a temporary repository,
// driven over real HTTP on loopback. One server per test function; the
// subtests share it, so their order matters where one reads counters
// another left (stats and metrics come after the inferences).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// httpOutput is one output of a KServe v2 infer response.
type httpOutput struct {
	Name       string          `json:"name"`
	Datatype   string          `json:"datatype"`
	Shape      []int64         `json:"shape"`
	Parameters map[string]any  `json:"parameters"`
	Data       json.RawMessage `json:"data"`
}

// httpResponse is a KServe v2 infer response; Blobs holds the binary data
// of the outputs that came as binary, by name.
type httpResponse struct {
	ID           string         `json:"id"`
	ModelName    string         `json:"model_name"`
	ModelVersion string         `json:"model_version"`
	Parameters   map[string]any `json:"parameters"`
	Outputs      []httpOutput   `json:"outputs"`
	Blobs        map[string][]byte
}

// httpDtypeCase is one data type of identity_all with its JSON and binary form.
type httpDtypeCase struct {
	dtype string
	json  string // JSON data, "" when the type has no JSON form
	blob  []byte
	n     int64
}

var httpDtypeCases = []httpDtypeCase{
	{"BOOL", `[true,false,true]`, []byte{1, 0, 1}, 3},
	{"UINT8", `[0,7,255]`, httpLE(uint8(0), uint8(7), uint8(255)), 3},
	{"UINT16", `[0,7,65535]`, httpLE(uint16(0), uint16(7), uint16(65535)), 3},
	{"UINT32", `[0,7,4294967295]`, httpLE(uint32(0), uint32(7), uint32(4294967295)), 3},
	{"UINT64", `[0,7,18446744073709551615]`, httpLE(uint64(0), uint64(7), uint64(math.MaxUint64)), 3},
	{"INT8", `[-128,0,127]`, httpLE(int8(-128), int8(0), int8(127)), 3},
	{"INT16", `[-32768,0,32767]`, httpLE(int16(-32768), int16(0), int16(32767)), 3},
	{"INT32", `[-2147483648,0,2147483647]`, httpLE(int32(math.MinInt32), int32(0), int32(math.MaxInt32)), 3},
	{"INT64", `[-9223372036854775808,0,9223372036854775807]`, httpLE(int64(math.MinInt64), int64(0), int64(math.MaxInt64)), 3},
	// FP16 and BF16 have no JSON form: 1.0, -2.0, 0.5.
	{"FP16", "", httpLE(uint16(0x3c00), uint16(0xc000), uint16(0x3800)), 3},
	{"BF16", "", httpLE(uint16(0x3f80), uint16(0xc000), uint16(0x3f00)), 3},
	{"FP32", `[1.5,-2.25,0]`, httpLE(float32(1.5), float32(-2.25), float32(0)), 3},
	{"FP64", `[0.1,-1e+300,2.5]`, httpLE(0.1, -1e300, 2.5), 3},
	{"BYTES", `["abc","","ünï"]`, httpBytesElems("abc", "", "ünï"), 3},
}

// TestHTTPEndpoints drives every HTTP endpoint of one server whose
// repository holds working models beside broken ones.
func TestHTTPEndpoints(t *testing.T) {
	ipctest.RequirePython(t)
	repo := copyRepo(t, "add_sub", "identity_all", "e2e_echo", "init_fails")
	// A config field that does not exist, and a model.py that cannot import.
	httpWriteModel(t, repo, "e2e_bad_field", httpFP32Config("e2e_bad_field", "max_batch_sizes: 4"),
		map[string]string{"model.py": "class TritonPythonModel:\n    pass\n"})
	httpWriteModel(t, repo, "e2e_import_error", httpFP32Config("e2e_import_error", ""),
		map[string]string{"model.py": "import e2e_no_such_module\n\nclass TritonPythonModel:\n    pass\n"})
	const maxInput = 2 << 20
	s := startServer(t, repo, "--http-max-input-size", strconv.Itoa(maxInput))

	t.Run("health", func(t *testing.T) {
		code, _, body := s.do("GET", "/v2/health/live", nil)
		if code != 200 || len(body) != 0 {
			t.Errorf("live: %d %q, want 200 and an empty body", code, body)
		}
		// Whether models that failed to load keep a strict server unready
		// is the supervisor's policy; either way the body is empty.
		code, _, body = s.do("GET", "/v2/health/ready", nil)
		if code != 200 && code != 400 || len(body) != 0 {
			t.Errorf("ready with broken models: %d %q, want 200 or 400 and an empty body", code, body)
		}
		code, _, body = s.do("POST", "/v2/health/live", nil)
		if code != 405 || httpErrorText(t, body) != "Method Not Allowed" {
			t.Errorf("POST live: %d %s", code, body)
		}
		code, _, body = s.do("GET", "/v2/no/such/path", nil)
		if code != 404 || httpErrorText(t, body) != "Not Found" {
			t.Errorf("unknown path: %d %s", code, body)
		}
	})

	t.Run("server metadata", func(t *testing.T) {
		var md struct {
			Name       string   `json:"name"`
			Version    string   `json:"version"`
			Extensions []string `json:"extensions"`
		}
		s.getJSON("/v2", &md)
		if md.Name != "triton" || md.Version != version {
			t.Errorf("name/version = %q/%q, want triton/%s", md.Name, md.Version, version)
		}
		// Triton's order, every extension this server implements.
		want := []string{"classification", "sequence", "model_repository", "model_repository(unload_dependents)",
			"schedule_policy", "model_configuration", "system_shared_memory", "cuda_shared_memory",
			"binary_tensor_data", "parameters", "statistics"}
		if len(md.Extensions) < len(want) || !slices.Equal(md.Extensions[:len(want)], want) {
			t.Errorf("extensions = %q, want to start with %q", md.Extensions, want)
		}
		if !slices.Contains(md.Extensions, "logging") {
			t.Errorf("extensions %q lack logging", md.Extensions)
		}
	})

	t.Run("model metadata", func(t *testing.T) {
		type io struct {
			Name     string  `json:"name"`
			Datatype string  `json:"datatype"`
			Shape    []int64 `json:"shape"`
		}
		var md struct {
			Name     string   `json:"name"`
			Versions []string `json:"versions"`
			Platform string   `json:"platform"`
			Inputs   []io     `json:"inputs"`
			Outputs  []io     `json:"outputs"`
		}
		for _, path := range []string{"/v2/models/add_sub", "/v2/models/add_sub/versions/1"} {
			s.getJSON(path, &md)
			if md.Name != "add_sub" || !slices.Equal(md.Versions, []string{"1"}) || md.Platform != "python" {
				t.Errorf("%s: %+v", path, md)
			}
			wantIn := []io{{"INPUT0", "FP32", []int64{4}}, {"INPUT1", "FP32", []int64{4}}}
			if len(md.Inputs) != 2 || fmt.Sprint(md.Inputs) != fmt.Sprint(wantIn) {
				t.Errorf("%s inputs = %+v, want %+v", path, md.Inputs, wantIn)
			}
			if len(md.Outputs) != 2 || md.Outputs[1].Name != "OUTPUT1" {
				t.Errorf("%s outputs = %+v", path, md.Outputs)
			}
		}
		s.getJSON("/v2/models/identity_all", &md)
		var strType string
		for _, in := range md.Inputs {
			if in.Name == "INPUT_STRING" {
				strType = in.Datatype
			}
		}
		if strType != "BYTES" || len(md.Inputs) != 14 {
			t.Errorf("identity_all: TYPE_STRING shows as %q, %d inputs", strType, len(md.Inputs))
		}
		code, _, body := s.do("GET", "/v2/models/no_such_model", nil)
		if code != 400 || !strings.Contains(httpErrorText(t, body), "'no_such_model'") {
			t.Errorf("unknown model: %d %s", code, body)
		}
		code, _, body = s.do("GET", "/v2/models/add_sub/versions/9", nil)
		if code != 404 || !strings.Contains(httpErrorText(t, body), "version 9") {
			t.Errorf("unknown version: %d %s", code, body)
		}
	})

	t.Run("model config", func(t *testing.T) {
		var cfg struct {
			Name         string `json:"name"`
			Backend      string `json:"backend"`
			MaxBatchSize *int   `json:"max_batch_size"`
			Input        []struct {
				Name     string `json:"name"`
				DataType string `json:"data_type"`
				Dims     []any  `json:"dims"`
			} `json:"input"`
		}
		s.getJSON("/v2/models/add_sub/config", &cfg)
		if cfg.Name != "add_sub" || cfg.Backend != "python" || cfg.MaxBatchSize == nil || *cfg.MaxBatchSize != 0 {
			t.Errorf("config = %+v", cfg)
		}
		// dims are JSON numbers, not the strings protobuf JSON gives int64s.
		if len(cfg.Input) != 2 || cfg.Input[0].DataType != "TYPE_FP32" || fmt.Sprintf("%T", cfg.Input[0].Dims[0]) != "float64" {
			t.Errorf("config inputs = %+v", cfg.Input)
		}
	})

	t.Run("model ready", func(t *testing.T) {
		for _, c := range []struct {
			path string
			code int
		}{
			{"/v2/models/add_sub/ready", 200},
			{"/v2/models/add_sub/versions/1/ready", 200},
			{"/v2/models/add_sub/versions/2/ready", 400},
			{"/v2/models/init_fails/ready", 400},
			{"/v2/models/no_such_model/ready", 400},
		} {
			code, _, body := s.do("GET", c.path, nil)
			if code != c.code {
				t.Errorf("%s: %d %s, want %d", c.path, code, body, c.code)
			}
			if code == 400 && httpErrorText(t, body) != "Model version not ready" {
				t.Errorf("%s: %s", c.path, body)
			}
		}
	})

	t.Run("repository index", func(t *testing.T) {
		type entry struct {
			Name    string `json:"name"`
			Version string `json:"version"`
			State   string `json:"state"`
			Reason  string `json:"reason"`
		}
		code, body := s.postJSON("/v2/repository/index", map[string]any{})
		if code != 200 {
			t.Fatalf("index: %d %s", code, body)
		}
		var idx []entry
		if err := json.Unmarshal(body, &idx); err != nil {
			t.Fatal(err)
		}
		byName := map[string]entry{}
		for _, e := range idx {
			byName[e.Name] = e
		}
		for _, m := range []string{"add_sub", "identity_all", "e2e_echo"} {
			if e := byName[m]; e.State != "READY" || e.Version != "1" {
				t.Errorf("%s: %+v, want READY version 1", m, e)
			}
		}
		// Each broken model says which file and what is wrong with it.
		for m, wants := range map[string][]string{
			"init_fails":       {"initialize refuses to load this model", "model.py"},
			"e2e_bad_field":    {"config.pbtxt", "max_batch_sizes"},
			"e2e_import_error": {"e2e_no_such_module", "model.py"},
		} {
			e := byName[m]
			if e.State != "UNAVAILABLE" {
				t.Errorf("%s: state %q, want UNAVAILABLE", m, e.State)
			}
			for _, w := range wants {
				if !strings.Contains(e.Reason, w) {
					t.Errorf("%s: reason %q lacks %q", m, e.Reason, w)
				}
			}
		}
		code, body = s.postJSON("/v2/repository/index", map[string]any{"ready": true})
		if err := json.Unmarshal(body, &idx); code != 200 || err != nil {
			t.Fatalf("index ready: %d %s", code, body)
		}
		for _, e := range idx {
			if e.State != "READY" {
				t.Errorf("ready index lists %+v", e)
			}
		}
		if len(idx) != 3 {
			t.Errorf("ready index has %d entries, want 3: %+v", len(idx), idx)
		}
		code, body = s.postJSON("/v2/repository/index", map[string]any{"ready": "yes"})
		if code != 400 || httpErrorText(t, body) != "Invalid value for 'ready': expected a boolean" {
			t.Errorf("non-bool ready: %d %s", code, body)
		}
	})

	t.Run("load and unload need explicit mode", func(t *testing.T) {
		for _, action := range []string{"load", "unload"} {
			code, body := s.postJSON("/v2/repository/models/add_sub/"+action, map[string]any{})
			if code != 503 || httpErrorText(t, body) != "explicit model load / unload is not allowed if polling is enabled" {
				t.Errorf("%s: %d %s", action, code, body)
			}
		}
	})

	t.Run("logging", func(t *testing.T) {
		var ls map[string]any
		s.getJSON("/v2/logging", &ls)
		want := `{"log_error":true,"log_file":"","log_format":"default","log_info":true,"log_verbose_level":0,"log_warning":true}`
		if b, _ := json.Marshal(ls); string(b) != want {
			t.Errorf("logging = %s, want %s", b, want)
		}
		code, body := s.postJSON("/v2/logging", map[string]any{"log_verbose_level": 1, "log_format": "ISO8601"})
		if code != 200 || !strings.Contains(string(body), `"log_verbose_level":1`) || !strings.Contains(string(body), `"log_format":"ISO8601"`) {
			t.Errorf("set logging: %d %s", code, body)
		}
		s.getJSON("/v2/logging", &ls)
		if ls["log_verbose_level"] != 1.0 {
			t.Errorf("after POST: %v", ls)
		}
		code, body = s.postJSON("/v2/logging", map[string]any{"log_verbose_level": 0, "log_format": "default"})
		if code != 200 {
			t.Errorf("reset logging: %d %s", code, body)
		}
		code, body = s.postJSON("/v2/logging", map[string]any{"log_format": "xml"})
		if code != 503 || httpErrorText(t, body) != "invalid argument for --log_format, got: xml" {
			t.Errorf("bad format: %d %s", code, body)
		}
		code, body = s.postJSON("/v2/logging", map[string]any{"log_file": "/tmp/x"})
		if code != 501 {
			t.Errorf("log_file: %d %s, want 501", code, body)
		}
		code, body = s.postJSON("/v2/logging", map[string]any{"log_info": "yes"})
		if code != 400 {
			t.Errorf("non-bool log_info: %d %s, want 400", code, body)
		}
	})

	t.Run("infer JSON every dtype", func(t *testing.T) {
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
	})

	t.Run("infer binary every dtype", func(t *testing.T) {
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
	})

	t.Run("requested outputs mix binary and JSON", func(t *testing.T) {
		in := httpLE(float32(1), float32(2), float32(3), float32(4))
		one := httpLE(float32(1), float32(1), float32(1), float32(1))
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
		if want := httpLE(float32(0), float32(1), float32(2), float32(3)); !bytes.Equal(r.Blobs["OUTPUT1"], want) {
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
		if want := httpLE(float32(5), float32(5), float32(5), float32(5)); !bytes.Equal(r.Blobs["OUTPUT0"], want) {
			t.Errorf("binary_data_output OUTPUT0 = %x, want %x", r.Blobs["OUTPUT0"], want)
		}
		if len(r.Blobs) != 2 {
			t.Errorf("binary_data_output: blobs %v, want both outputs", r.Blobs)
		}
	})

	t.Run("raw binary request", func(t *testing.T) {
		in := httpLE(float32(1.5), float32(-1), float32(8))
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
	})

	t.Run("request and response parameters", func(t *testing.T) {
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
	})

	t.Run("bad requests", func(t *testing.T) {
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
	})

	t.Run("stats", func(t *testing.T) {
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
	})

	t.Run("metrics", func(t *testing.T) {
		resp, err := http.Get(s.Metrics + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		text := b.String()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
			t.Fatalf("metrics: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
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
	})

	t.Run("stubs", func(t *testing.T) {
		var all []struct {
			Model string `json:"model"`
			State string `json:"state"`
			Stubs []struct {
				Instance string `json:"instance"`
				Kind     string `json:"kind"`
				PID      int    `json:"pid"`
				State    string `json:"state"`
				Restarts int    `json:"restarts"`
			} `json:"stubs"`
		}
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
	})
}
