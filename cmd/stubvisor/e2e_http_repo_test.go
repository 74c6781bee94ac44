package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// TestHTTPRepositoryExplicit loads and unloads models over HTTP in
// explicit mode, with config overrides and file: parameters.
func TestHTTPRepositoryExplicit(t *testing.T) {
	slow(t)
	ipctest.RequirePython(t)
	repo := copyRepo(t, "add_sub", "identity_fp32")
	s := startServer(t, repo, "--model-control-mode", "explicit", "--load-model", "add_sub")

	type entry struct {
		Name, Version, State, Reason string
	}
	index := func(t *testing.T) map[string]entry {
		t.Helper()
		code, _, body := s.do("POST", "/v2/repository/index", nil)
		var idx []entry
		if err := json.Unmarshal(body, &idx); code != 200 || err != nil {
			t.Fatalf("index: %d %s", code, body)
		}
		m := map[string]entry{}
		for _, e := range idx {
			m[e.Name] = e
		}
		return m
	}
	identity := func(t *testing.T) (int, httpResponse, []byte) {
		code, body := s.httpInferJSON("identity_fp32", map[string]any{"inputs": []map[string]any{
			{"name": "INPUT0", "shape": []int{3}, "datatype": "FP32", "data": []float32{1, 2, 3}}}})
		if code != 200 {
			return code, httpResponse{}, body
		}
		return code, httpDecodeInfer(t, code, http.Header{"Content-Type": {"application/json"}}, body), body
	}

	t.Run("only load-model is loaded", func(t *testing.T) {
		idx := index(t)
		if idx["add_sub"].State != "READY" {
			t.Errorf("add_sub: %+v", idx["add_sub"])
		}
		if e, ok := idx["identity_fp32"]; !ok || e.State != "" {
			t.Errorf("identity_fp32 before load: %+v (present %v), want a bare name", e, ok)
		}
		if code, _, _ := s.do("GET", "/v2/health/ready", nil); code != 200 {
			t.Errorf("ready: %d, want 200", code)
		}
		if code, body, _ := identity(t); code == 200 {
			t.Errorf("infer on a model not loaded: %d %s", code, body.ModelName)
		}
	})

	t.Run("load then unload", func(t *testing.T) {
		code, _, body := s.do("POST", "/v2/repository/models/identity_fp32/load", nil)
		if code != 200 || len(body) != 0 {
			t.Fatalf("load: %d %q", code, body)
		}
		if e := index(t)["identity_fp32"]; e.State != "READY" || e.Version != "1" {
			t.Errorf("after load: %+v", e)
		}
		if code, r, body := identity(t); code != 200 || httpCanonJSON(t, r.output(t, "OUTPUT0").Data) != "[1,2,3]" {
			t.Errorf("infer after load: %d %s", code, body)
		}
		code, body = s.postJSON("/v2/repository/models/identity_fp32/unload", map[string]any{"parameters": map[string]any{"unload_dependents": false}})
		if code != 200 {
			t.Fatalf("unload: %d %s", code, body)
		}
		if e := index(t)["identity_fp32"]; e.State != "UNAVAILABLE" || e.Reason != "unloaded" {
			t.Errorf("after unload: %+v, want UNAVAILABLE/unloaded", e)
		}
		if code, _, body := identity(t); code == 200 {
			t.Errorf("infer after unload succeeded: %s", body)
		}
	})

	t.Run("config override", func(t *testing.T) {
		cfg := `{"backend":"python","max_batch_size":0,` +
			`"input":[{"name":"INPUT0","data_type":"TYPE_FP32","dims":[3]}],` +
			`"output":[{"name":"OUTPUT0","data_type":"TYPE_FP32","dims":[3]}]}`
		code, body := s.postJSON("/v2/repository/models/identity_fp32/load", map[string]any{"parameters": map[string]any{"config": cfg}})
		if code != 200 {
			t.Fatalf("load with config: %d %s", code, body)
		}
		var md struct {
			Inputs []struct {
				Shape []int64 `json:"shape"`
			} `json:"inputs"`
		}
		s.getJSON("/v2/models/identity_fp32", &md)
		if len(md.Inputs) != 1 || !slices.Equal(md.Inputs[0].Shape, []int64{3}) {
			t.Errorf("metadata after override: %+v, want shape [3]", md)
		}
		code, body = s.httpInferJSON("identity_fp32", map[string]any{"inputs": []map[string]any{
			{"name": "INPUT0", "shape": []int{4}, "datatype": "FP32", "data": []float32{1, 2, 3, 4}}}})
		if code != 400 || !strings.Contains(httpErrorText(t, body), "Expected [3], got [4]") {
			t.Errorf("infer against the override: %d %s", code, body)
		}
		code, body = s.postJSON("/v2/repository/models/identity_fp32/load", map[string]any{"parameters": map[string]any{"config": `{"no_such_field":1}`}})
		if code != 400 || !strings.Contains(httpErrorText(t, body), "no_such_field") {
			t.Errorf("override with an unknown field: %d %s", code, body)
		}
	})

	t.Run("file parameters", func(t *testing.T) {
		doubler := "import triton_python_backend_utils as pb_utils\n\n" +
			"class TritonPythonModel:\n" +
			"    def execute(self, requests):\n" +
			"        return [pb_utils.InferenceResponse([pb_utils.Tensor('OUTPUT0', 2 * pb_utils.get_input_tensor_by_name(r, 'INPUT0').as_numpy())]) for r in requests]\n"
		cfg := httpFP32ConfigJSON()
		// Triton takes the path with or without a leading slash.
		for _, key := range []string{"file:1/model.py", "file:/1/model.py"} {
			code, body := s.postJSON("/v2/repository/models/identity_fp32/load", map[string]any{"parameters": map[string]any{
				"config": cfg, key: base64.StdEncoding.EncodeToString([]byte(doubler))}})
			if code != 200 {
				t.Fatalf("load with %s: %d %s", key, code, body)
			}
			if code, r, body := identity(t); code != 200 || httpCanonJSON(t, r.output(t, "OUTPUT0").Data) != "[2,4,6]" {
				t.Errorf("infer on the %s override: %d %s, want doubled", key, code, body)
			}
			// Loading again without parameters goes back to the repository's files.
			if code, _, body := s.do("POST", "/v2/repository/models/identity_fp32/load", nil); code != 200 {
				t.Fatalf("reload: %d %s", code, body)
			}
			if code, r, body := identity(t); code != 200 || httpCanonJSON(t, r.output(t, "OUTPUT0").Data) != "[1,2,3]" {
				t.Errorf("infer after reload: %d %s, want identity", code, body)
			}
		}
		for _, c := range []struct {
			name   string
			params map[string]any
		}{
			{"file without config", map[string]any{"file:1/model.py": base64.StdEncoding.EncodeToString([]byte(doubler))}},
			{"bad base64", map[string]any{"config": cfg, "file:1/model.py": "%%%not base64"}},
			{"path out of the model", map[string]any{"config": cfg, "file:/../1/model.py": base64.StdEncoding.EncodeToString([]byte(doubler))}},
		} {
			code, body := s.postJSON("/v2/repository/models/identity_fp32/load", map[string]any{"parameters": c.params})
			if code != 400 || httpErrorText(t, body) == "" {
				t.Errorf("%s: %d %s, want 400 with a reason", c.name, code, body)
			}
		}
		code, _, body := s.do("POST", "/v2/repository/my_repo/models/identity_fp32/load", nil)
		if code != 501 || httpErrorText(t, body) != "'repository_name' specification is not supported" {
			t.Errorf("named repository: %d %s", code, body)
		}
	})
}

func httpFP32ConfigJSON() string {
	return `{"backend":"python","max_batch_size":0,` +
		`"input":[{"name":"INPUT0","data_type":"TYPE_FP32","dims":[-1]}],` +
		`"output":[{"name":"OUTPUT0","data_type":"TYPE_FP32","dims":[-1]}]}`
}

// TestHTTPGracefulShutdown sends SIGTERM while a request is in execute:
// the request completes, finalize runs, the process exits in time, and
// the harness finds no stub or /dev/shm entry left.
func TestHTTPGracefulShutdown(t *testing.T) {
	ipctest.RequirePython(t)
	const exitTimeout = 20 * time.Second
	s := startServer(t, copyRepo(t, "e2e_echo"), "--exit-timeout-secs", strconv.Itoa(int(exitTimeout/time.Second)))

	type result struct {
		code int
		h    http.Header
		body []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		b, _ := json.Marshal(map[string]any{
			"parameters": map[string]any{"sleep_ms": 1500},
			"inputs":     []map[string]any{{"name": "INPUT0", "shape": []int{2}, "datatype": "FP32", "data": []float32{7, 8}}},
		})
		resp, err := http.Post(s.HTTP+"/v2/models/e2e_echo/infer", "application/json", bytes.NewReader(b))
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		_, err = buf.ReadFrom(resp.Body)
		done <- result{resp.StatusCode, resp.Header, buf.Bytes(), err}
	}()
	waitInFlight(t, s, "e2e_echo", 1, 10*time.Second, "the request to be in execute")
	start := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var res result
	select {
	case res = <-done:
	case <-time.After(exitTimeout):
		t.Fatal("the in-flight request was not answered")
	}
	if res.err != nil {
		t.Fatalf("in-flight request: %v", res.err)
	}
	r := httpDecodeInfer(t, res.code, res.h, res.body)
	if httpCanonJSON(t, r.output(t, "OUTPUT0").Data) != "[7,8]" {
		t.Errorf("in-flight request answered %s", res.body)
	}
	select {
	case <-s.exited:
	case <-time.After(exitTimeout + 5*time.Second):
		t.Fatalf("stubvisor still running %s after SIGTERM", time.Since(start))
	}
	log := s.Log()
	for _, want := range []string{"shutting down", "e2e_echo: finalize ran", "stopped"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	if s.waitErr != nil {
		t.Errorf("exit status: %v", s.waitErr)
	}
}
