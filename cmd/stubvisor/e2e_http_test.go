package main

// The HTTP end-to-end suite: the built binary on a temporary repository,
// driven over real HTTP on loopback. One server per test function; the
// subtests share it, so their order matters where one reads counters
// another left (stats and metrics come after the inferences).

import (
	"encoding/json"
	"fmt"
	"math"
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
	{"BYTES", `["abc","","ünï"]`, ipctest.BYTES("abc", "", "ünï"), 3},
}

// TestHTTPEndpoints drives every HTTP endpoint of one server whose
// repository holds working models beside broken ones.
// maxInput is the --http-max-input-size of TestHTTPEndpoints' server.
const maxInput = 2 << 20

// httpSuite is what the cases of TestHTTPEndpoints share: one server and what
// it was started with.
type httpSuite struct {
	s    *server
	repo string
}

// httpCases are TestHTTPEndpoints' named cases, run in order against one server.
var httpCases = []struct {
	name string
	run  func(t *testing.T, e httpSuite)
}{
	{"health", httpHealth},
	{"server metadata", httpServerMetadata},
	{"model metadata", httpModelMetadata},
	{"model config", httpModelConfig},
	{"model ready", httpModelReady},
	{"repository index", httpRepositoryIndex},
	{"load and unload need explicit mode", httpLoadAndUnloadNeedExplicitMode},
	{"logging", httpLogging},
	{"infer JSON every dtype", httpInferJSONEveryDtype},
	{"infer binary every dtype", httpInferBinaryEveryDtype},
	{"requested outputs mix binary and JSON", httpRequestedOutputsMixBinaryAndJSON},
	{"raw binary request", httpRawBinaryRequest},
	{"request and response parameters", httpRequestAndResponseParameters},
	{"bad requests", httpBadRequests},
	{"stats", httpStats},
	{"metrics", httpMetrics},
	{"stubs", httpStubs},
}

func TestHTTPEndpoints(t *testing.T) {
	ipctest.RequirePython(t)
	repo := copyRepo(t, "add_sub", "identity_all", "e2e_echo", "init_fails")
	// A config field that does not exist, and a model.py that cannot import.
	httpWriteModel(t, repo, "e2e_bad_field", httpFP32Config("e2e_bad_field", "max_batch_sizes: 4"),
		map[string]string{"model.py": "class TritonPythonModel:\n    pass\n"})
	httpWriteModel(t, repo, "e2e_import_error", httpFP32Config("e2e_import_error", ""),
		map[string]string{"model.py": "import e2e_no_such_module\n\nclass TritonPythonModel:\n    pass\n"})
	s := startServer(t, repo, "--http-max-input-size", strconv.Itoa(maxInput))
	e := httpSuite{s: s, repo: repo}
	for _, c := range httpCases {
		t.Run(c.name, func(t *testing.T) { c.run(t, e) })
	}
}

// httpHealth is the case "health" of TestHTTPEndpoints.
func httpHealth(t *testing.T, e httpSuite) {
	s := e.s
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
}

// httpServerMetadata is the case "server metadata" of TestHTTPEndpoints.
func httpServerMetadata(t *testing.T, e httpSuite) {
	s := e.s
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
}

// httpModelMetadata is the case "model metadata" of TestHTTPEndpoints.
func httpModelMetadata(t *testing.T, e httpSuite) {
	s := e.s
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
}

// httpModelConfig is the case "model config" of TestHTTPEndpoints.
func httpModelConfig(t *testing.T, e httpSuite) {
	s := e.s
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
}

// httpModelReady is the case "model ready" of TestHTTPEndpoints.
func httpModelReady(t *testing.T, e httpSuite) {
	s := e.s
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
}

// httpRepositoryIndex is the case "repository index" of TestHTTPEndpoints.
func httpRepositoryIndex(t *testing.T, e httpSuite) {
	s := e.s
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
}

// httpLoadAndUnloadNeedExplicitMode is the case "load and unload need explicit mode" of TestHTTPEndpoints.
func httpLoadAndUnloadNeedExplicitMode(t *testing.T, e httpSuite) {
	s := e.s
	for _, action := range []string{"load", "unload"} {
		code, body := s.postJSON("/v2/repository/models/add_sub/"+action, map[string]any{})
		if code != 503 || httpErrorText(t, body) != "explicit model load / unload is not allowed if polling is enabled" {
			t.Errorf("%s: %d %s", action, code, body)
		}
	}
}

// httpLogging is the case "logging" of TestHTTPEndpoints.
func httpLogging(t *testing.T, e httpSuite) {
	s := e.s
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
}
