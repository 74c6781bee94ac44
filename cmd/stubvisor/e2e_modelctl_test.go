package main

// End-to-end test of the model loading API of pb_utils (load_model,
// unload_model, is_model_ready) called from a model.py:
// testdata/models/model_control.

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// doubleModel is a model.py that answers OUTPUT0 = 2 * INPUT0, loaded
// through load_model's file override.
const doubleModel = `import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", 2 * pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
                for r in requests]
`

func TestModelLoadingAPI(t *testing.T) {
	ipctest.RequirePython(t)
	repo := copyRepo(t, "model_control", "add_sub", "identity_fp32")
	// Only model_control is asked for; its initialize loads add_sub.
	s := startServer(t, repo, "--model-control-mode", "explicit", "--load-model", "model_control")

	// control runs one operation from inside model_control's execute and
	// returns its RESULT, or the error text.
	control := func(params map[string]any) (bool, string) {
		t.Helper()
		code, body := s.postJSON("/v2/models/model_control/infer", map[string]any{"parameters": params, "inputs": []any{}})
		if code != http.StatusOK {
			return false, errorText(body)
		}
		var r struct {
			Outputs []struct {
				Data []bool `json:"data"`
			} `json:"outputs"`
		}
		if err := json.Unmarshal(body, &r); err != nil || len(r.Outputs) != 1 || len(r.Outputs[0].Data) != 1 {
			t.Fatalf("model_control answered %s", body)
		}
		return r.Outputs[0].Data[0], ""
	}
	ready := func(model string) int {
		t.Helper()
		code, _, _ := s.do("GET", "/v2/models/"+model+"/ready", nil)
		return code
	}
	identity := func(model string) []float32 {
		t.Helper()
		code, body := s.postJSON("/v2/models/"+model+"/infer", map[string]any{"inputs": []map[string]any{
			{"name": "INPUT0", "datatype": "FP32", "shape": []int{2}, "data": []float32{1.5, -3}}}})
		var a blsAnswer
		if code != http.StatusOK || json.Unmarshal(body, &a) != nil {
			t.Fatalf("%s: %d %s", model, code, body)
		}
		return a.output("OUTPUT0")
	}

	if code := ready("add_sub"); code != http.StatusOK {
		t.Fatalf("add_sub, loaded by model_control's initialize: ready answered %d", code)
	}
	steps := []struct {
		name   string
		params map[string]any
		want   bool
		err    string
	}{
		{"is_ready of a loaded model", map[string]any{"op": "is_ready", "model": "add_sub"}, true, ""},
		{"is_ready of a version that is not loaded", map[string]any{"op": "is_ready", "model": "add_sub", "version": "7"}, false, ""},
		{"unload", map[string]any{"op": "unload", "model": "add_sub"}, true, ""},
		{"is_ready after unload", map[string]any{"op": "is_ready", "model": "add_sub"}, false, ""},
		{"is_ready of an unknown model", map[string]any{"op": "is_ready", "model": "no_such_model"}, false, ""},
		{"load", map[string]any{"op": "load", "model": "identity_fp32"}, true, ""},
		{"is_ready after load", map[string]any{"op": "is_ready", "model": "identity_fp32", "version": "1"}, true, ""},
		{"load of a model not in the repository", map[string]any{"op": "load", "model": "no_such_model"}, false,
			"failed to load 'no_such_model', failed to poll from model repository"},
		{"files without config", map[string]any{"op": "load", "model": "identity_fp32", "file:1/model.py": doubleModel}, false,
			"failed to load 'identity_fp32', the model configuration must be provided when model files are provided"},
	}
	for _, st := range steps {
		got, err := control(st.params)
		if got != st.want || err != st.err {
			t.Fatalf("%s: got %v %q, want %v %q", st.name, got, err, st.want, st.err)
		}
	}
	if code := ready("add_sub"); code == http.StatusOK {
		t.Fatal("add_sub is still ready after unload_model")
	}
	if got := identity("identity_fp32"); !slices.Equal(got, []float32{1.5, -3}) {
		t.Fatalf("identity_fp32 loaded by load_model answered %v", got)
	}

	// A config and file override replace the model's files.
	cfg := `{"name": "identity_fp32", "backend": "python", "max_batch_size": 0,
		"input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
		"output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}]}`
	if _, err := control(map[string]any{"op": "load", "model": "identity_fp32", "config": cfg, "file:1/model.py": doubleModel}); err != "" {
		t.Fatalf("load with overrides: %s", err)
	}
	if got := identity("identity_fp32"); !slices.Equal(got, []float32{3, -6}) {
		t.Fatalf("identity_fp32 reloaded with a model.py override answered %v, want [3 -6]", got)
	}
}

// TestUserReadiness checks that a model's own is_ready() decides its
// readiness over HTTP and gRPC, as in Triton: False, an exception or no
// answer within 5 s make it not ready, while inference goes on.
func TestUserReadiness(t *testing.T) {
	slow(t)
	ipctest.RequirePython(t)
	// Most of this test is the 7 s readiness check below; it shares
	// nothing with other tests, so the slow-instance test sleeps beside it.
	t.Parallel()
	s := startServer(t, copyRepo(t, "readiness"))
	_, c := grpcClient(t, s)
	set := func(params map[string]any) {
		t.Helper()
		if code, body := s.postJSON("/v2/models/readiness/infer", map[string]any{"parameters": params, "inputs": []any{}}); code != http.StatusOK {
			t.Fatalf("readiness infer: %d %s", code, body)
		}
	}
	ready := func() (httpReady, grpcReady bool) {
		t.Helper()
		code, _, _ := s.do("GET", "/v2/models/readiness/ready", nil)
		r, err := c.ModelReady(callCtx(t), &pb.ModelReadyRequest{Name: "readiness"})
		if err != nil {
			t.Fatal(err)
		}
		return code == http.StatusOK, r.Ready
	}
	for _, step := range []struct {
		name   string
		params map[string]any
		want   bool
	}{
		{"is_ready() returns True", nil, true},
		{"is_ready() returns False", map[string]any{"ready": false}, false},
		{"is_ready() True again", map[string]any{"ready": true}, true},
		{"is_ready() raises", map[string]any{"raise": true}, false},
	} {
		if step.params != nil {
			set(step.params)
		}
		if h, g := ready(); h != step.want || g != step.want {
			t.Fatalf("%s: HTTP ready %v, gRPC ready %v, want %v", step.name, h, g, step.want)
		}
	}
	// A check slower than 5 s answers not ready (python_backend's QA
	// test_is_ready_takes_long_time). It runs beside execute: a request
	// made meanwhile is answered at once, and sees the check running.
	// The next readiness request waits for the check in flight instead of
	// asking again, and gets its answer.
	set(map[string]any{"raise": false, "sleep_ms": 7000})
	code, _, _ := s.do("GET", "/v2/models/readiness/ready", nil)
	if code == http.StatusOK {
		t.Fatal("a readiness check that took 7 s answered ready")
	}
	code, body := s.postJSON("/v2/models/readiness/infer", map[string]any{"inputs": []any{}})
	if code != http.StatusOK || !strings.Contains(string(body), `"name":"CHECKING","datatype":"BOOL","shape":[1],"data":[true]`) {
		t.Fatalf("a request during the slow check: %d %s, want CHECKING true", code, body)
	}
	r, err := c.ModelReady(callCtx(t), &pb.ModelReadyRequest{Name: "readiness"})
	if err != nil || !r.Ready {
		t.Fatalf("the check in flight answered %v %v, want ready", r, err)
	}
}

// TestResponseSenderNotDecoupled checks that a model that is not decoupled
// may answer through its response sender and return None, during execute
// or after it returned, as in Triton; a sender dropped unused fails the
// request instead of leaving the client waiting. go_sender_once does the
// same in Go with ModelRequest.SendLater and Send.
func TestResponseSenderNotDecoupled(t *testing.T) {
	ipctest.RequirePython(t)
	// The repository is used in place: Go models build from their sources
	// inside this module.
	repo := modelsRepo(t)
	s := startServer(t, repo, "--model-control-mode", "explicit",
		"--load-model", "sender_once", "--load-model", "go_sender_once")
	_, c := grpcClient(t, s)
	for _, tc := range []struct {
		model, mode, err string
	}{
		{"sender_once", "during", ""},
		{"sender_once", "after", ""},
		{"sender_once", "drop", "the response sender of the request was released without sending a response"},
		{"go_sender_once", "during", ""},
		{"go_sender_once", "after", ""},
	} {
		t.Run(tc.model+" "+tc.mode, func(t *testing.T) {
			code, body := s.postJSON("/v2/models/"+tc.model+"/infer", map[string]any{"parameters": map[string]any{"mode": tc.mode}, "inputs": []any{}})
			if tc.err != "" {
				if code != http.StatusInternalServerError || errorText(body) != tc.err {
					t.Fatalf("HTTP: %d %s, want 500 %q", code, body, tc.err)
				}
			} else if code != http.StatusOK || !strings.Contains(string(body), `"data":[1]`) {
				t.Fatalf("HTTP: %d %s", code, body)
			}
			resp, err := c.ModelInfer(callCtx(t), &pb.ModelInferRequest{ModelName: tc.model,
				Parameters: map[string]*pb.InferParameter{"mode": {ParameterChoice: &pb.InferParameter_StringParam{StringParam: tc.mode}}}})
			if tc.err != "" {
				wantStatus(t, err, codes.Internal, tc.err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, raw := outputByName(t, resp, "OUT"); string(raw) != string(ipctest.INT32(1)) {
				t.Fatalf("gRPC OUT = %v", raw)
			}
		})
	}
}
