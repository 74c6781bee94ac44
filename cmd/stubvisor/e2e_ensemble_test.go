package main

// End-to-end tests of ensembles: the testdata repository in place (its Go
// model is built inside this module), explicit model control, real stubs,
// HTTP and gRPC on loopback.

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// ensFP32 is a JSON infer request with one FP32 input INPUT0.
func ensFP32(params map[string]any, outputs []string, vals ...float32) map[string]any {
	req := map[string]any{"inputs": []map[string]any{{"name": "INPUT0", "shape": []int{len(vals)}, "datatype": "FP32", "data": vals}}}
	if params != nil {
		req["parameters"] = params
	}
	if outputs != nil {
		var outs []map[string]any
		for _, o := range outputs {
			outs = append(outs, map[string]any{"name": o})
		}
		req["outputs"] = outs
	}
	return req
}

// ensOutputs posts a JSON request and returns each output's data as text.
func ensOutputs(t *testing.T, s *server, model string, req any) map[string]string {
	t.Helper()
	code, body := s.httpInferJSON(model, req)
	if code != http.StatusOK {
		t.Fatalf("%s: %d %s", model, code, body)
	}
	r := httpDecodeInfer(t, code, http.Header{"Content-Type": {"application/json"}}, body)
	if r.ModelName != model {
		t.Errorf("model_name %q, want %q", r.ModelName, model)
	}
	out := map[string]string{}
	for _, o := range r.Outputs {
		out[o.Name] = string(o.Data)
	}
	return out
}

// ensStats returns a model's inference and execution counts and its
// success and failure counts.
func ensStats(t *testing.T, s *server, model string) [4]int {
	t.Helper()
	var st struct {
		ModelStats []struct {
			InferenceCount int `json:"inference_count"`
			ExecutionCount int `json:"execution_count"`
			InferenceStats struct {
				Success, Fail struct {
					Count int `json:"count"`
				}
			} `json:"inference_stats"`
		} `json:"model_stats"`
	}
	s.getJSON("/v2/models/"+model+"/stats", &st)
	if len(st.ModelStats) != 1 {
		t.Fatalf("%s: %d stats entries", model, len(st.ModelStats))
	}
	m := st.ModelStats[0]
	return [4]int{m.InferenceCount, m.ExecutionCount, m.InferenceStats.Success.Count, m.InferenceStats.Fail.Count}
}

// ensPoolsIdle waits until no stub of the models holds arena memory: every
// tensor an ensemble passed between steps was released.
func ensPoolsIdle(t *testing.T, s *server, models ...string) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("the pools of %v to empty", models), func() bool {
		for _, m := range models {
			for _, st := range allStubs(t, s, m) {
				if st.PoolInUse != 0 {
					return false
				}
			}
		}
		return true
	})
}

func startEnsembleServer(t *testing.T, args ...string) *server {
	t.Helper()
	ipctest.RequirePython(t)
	repo := modelsRepo(t)
	return startServer(t, repo, append([]string{"--model-control-mode", "explicit", "--stub-restart-backoff", "10ms"}, args...)...)
}

func TestEnsemble(t *testing.T) {
	slow(t)
	s := startEnsembleServer(t, "--load-model", "ens_pipeline", "--load-model", "ens_diamond",
		"--load-model", "ens_stream", "--load-model", "ens_fail", "--load-model", "ens_kill", "--load-model", "ens_seq", "--load-model", "ens_hang")
	_, c := grpcClient(t, s)

	t.Run("pipeline http", func(t *testing.T) {
		// Python preprocess (x2) -> Go identity -> Python postprocess (+1).
		out := ensOutputs(t, s, "ens_pipeline", ensFP32(nil, nil, 1, 2, 3, 4))
		if out["OUTPUT0"] != "[3,5,7,9]" {
			t.Fatalf("OUTPUT0 = %s, want [3,5,7,9]", out["OUTPUT0"])
		}
	})

	t.Run("pipeline http binary large", func(t *testing.T) {
		// 1 MiB: the tensors between steps live in the stubs' arenas.
		in := make([]float32, 1<<18)
		for i := range in {
			in[i] = float32(i % 1000)
		}
		hdr := map[string]any{
			"inputs":  []map[string]any{{"name": "INPUT0", "shape": []int{len(in)}, "datatype": "FP32", "parameters": map[string]any{"binary_data_size": 4 * len(in)}}},
			"outputs": []map[string]any{{"name": "OUTPUT0", "parameters": map[string]any{"binary_data": true}}},
		}
		code, h, body := s.httpInferBinary("ens_pipeline", hdr, ipctest.FP32(in...))
		r := httpDecodeInfer(t, code, h, body)
		got := ipctest.FP32s(r.Blobs["OUTPUT0"])
		if len(got) != len(in) {
			t.Fatalf("%d elements back, want %d", len(got), len(in))
		}
		for i := range in {
			if got[i] != 2*in[i]+1 {
				t.Fatalf("element %d = %v, want %v", i, got[i], 2*in[i]+1)
			}
		}
	})

	t.Run("pipeline grpc", func(t *testing.T) {
		r, err := c.ModelInfer(callCtx(t), &pb.ModelInferRequest{ModelName: "ens_pipeline", Id: "g1",
			Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{3}}},
			RawInputContents: [][]byte{ipctest.FP32(0.5, -1, 10)}})
		if err != nil {
			t.Fatal(err)
		}
		_, raw := outputByName(t, r, "OUTPUT0")
		if got := fmt.Sprint(ipctest.FP32s(raw)); got != "[2 -1 21]" || r.Id != "g1" || r.ModelName != "ens_pipeline" {
			t.Fatalf("got %s (id %q, model %q)", got, r.Id, r.ModelName)
		}
	})

	t.Run("pipeline grpc stream", func(t *testing.T) {
		st, err := c.ModelStreamInfer(callCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if err := st.Send(&pb.ModelInferRequest{ModelName: "ens_pipeline", Id: fmt.Sprint(i),
				Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{1}}},
				RawInputContents: [][]byte{ipctest.FP32(float32(i))}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		got := map[string]float32{}
		for _, m := range recvStream(t, st) {
			_, raw := outputByName(t, m.InferResponse, "OUTPUT0")
			got[m.InferResponse.Id] = ipctest.FP32s(raw)[0]
		}
		if fmt.Sprint(got) != "map[0:1 1:3 2:5]" {
			t.Fatalf("streamed %v", got)
		}
	})

	t.Run("metadata and config", func(t *testing.T) {
		var md struct {
			Platform string   `json:"platform"`
			Versions []string `json:"versions"`
			Inputs   []struct {
				Name string `json:"name"`
			} `json:"inputs"`
		}
		s.getJSON("/v2/models/ens_diamond", &md)
		if md.Platform != "ensemble" || fmt.Sprint(md.Versions) != "[1]" || len(md.Inputs) != 1 || md.Inputs[0].Name != "INPUT0" {
			t.Fatalf("metadata %+v", md)
		}
		cfg, err := c.ModelConfig(callCtx(t), &pb.ModelConfigRequest{Name: "ens_stream"})
		if err != nil || !cfg.Config.GetModelTransactionPolicy().GetDecoupled() || len(cfg.Config.GetEnsembleScheduling().GetStep()) != 2 {
			t.Fatalf("ens_stream config %v, %v: an ensemble with a decoupled step is decoupled", cfg, err)
		}
	})

	t.Run("diamond", func(t *testing.T) {
		out := ensOutputs(t, s, "ens_diamond", ensFP32(nil, nil, 1, 2))
		if out["SUM"] != "[5,9]" || out["SCALED"] != "[2,4]" {
			t.Fatalf("outputs %v, want SUM [5,9] and SCALED [2,4]", out)
		}
	})

	t.Run("requested outputs prune steps", func(t *testing.T) {
		before := ensStats(t, s, "ens_join")
		out := ensOutputs(t, s, "ens_diamond", ensFP32(nil, []string{"SCALED"}, 3))
		if len(out) != 1 || out["SCALED"] != "[6]" {
			t.Fatalf("outputs %v, want only SCALED [6]", out)
		}
		if after := ensStats(t, s, "ens_join"); after != before {
			t.Fatalf("ens_join ran for a request that asked only for SCALED: %v -> %v", before, after)
		}
	})

	t.Run("decoupled step streams", func(t *testing.T) {
		st, err := c.ModelStreamInfer(callCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		vals := []int32{3, 4, 5}
		if err := st.Send(&pb.ModelInferRequest{ModelName: "ens_stream", Id: "s",
			Parameters: map[string]*pb.InferParameter{"triton_enable_empty_final_response": boolParam(true)},
			Inputs: []*pb.ModelInferRequest_InferInputTensor{
				{Name: "IN", Datatype: "INT32", Shape: []int64{3}},
				{Name: "DELAY", Datatype: "UINT32", Shape: []int64{3}},
				{Name: "WAIT", Datatype: "UINT32", Shape: []int64{1}},
			},
			RawInputContents: [][]byte{ipctest.INT32(vals...), ipctest.INT32(5, 5, 5), ipctest.INT32(0)}}); err != nil {
			t.Fatal(err)
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		var outs []string
		finals := 0
		for _, m := range recvStream(t, st) {
			r := m.InferResponse
			if r.Parameters["triton_final_response"].GetBoolParam() {
				finals++
			}
			if len(r.Outputs) == 0 {
				continue
			}
			_, out := outputByName(t, r, "OUT")
			_, idx := outputByName(t, r, "IDX")
			outs = append(outs, fmt.Sprintf("%d:%d", binary.LittleEndian.Uint32(idx), int32(binary.LittleEndian.Uint32(out))))
		}
		slices.Sort(outs)
		if strings.Join(outs, " ") != "0:30 1:40 2:50" || finals != 1 {
			t.Fatalf("streamed %v with %d final responses, want 0:30 1:40 2:50 and one final", outs, finals)
		}
		_, err = c.ModelInfer(callCtx(t), &pb.ModelInferRequest{ModelName: "ens_stream",
			Inputs: []*pb.ModelInferRequest_InferInputTensor{
				{Name: "IN", Datatype: "INT32", Shape: []int64{1}}, {Name: "DELAY", Datatype: "UINT32", Shape: []int64{1}},
				{Name: "WAIT", Datatype: "UINT32", Shape: []int64{1}}},
			RawInputContents: [][]byte{ipctest.INT32(1), ipctest.INT32(0), ipctest.INT32(0)}})
		wantStatus(t, err, codes.Unimplemented, "ModelInfer RPC doesn't support models with decoupled transaction policy")
	})

	t.Run("sequence flags and correlation id reach the step", func(t *testing.T) {
		// runSequence checks what seq_accumulate saw at every request:
		// START/END/READY/CORRID, flags, correlation_id and its running sum.
		if _, err := runSequence(s.HTTP, "ens_seq", 4242, 3); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("failing step", func(t *testing.T) {
		code, body := s.httpInferJSON("ens_fail", ensFP32(nil, nil, 1))
		if msg := httpErrorText(t, body); code != http.StatusInternalServerError ||
			!strings.HasPrefix(msg, "in ensemble 'ens_fail', Failed to process the request(s) for model 'execute_raises_0_0', message: RuntimeError: execute_raises: failing") {
			t.Fatalf("%d %s", code, msg)
		}
		// A step's own error code reaches the client (parameters reach
		// every step: ens_scale fails on "scale_error").
		code, body = s.httpInferJSON("ens_pipeline", ensFP32(map[string]any{"scale_error": true}, nil, 1))
		if msg := httpErrorText(t, body); code != http.StatusBadRequest || msg != "in ensemble 'ens_pipeline', ens_scale: failing on request" {
			t.Fatalf("%d %s", code, msg)
		}
		_, err := c.ModelInfer(callCtx(t), &pb.ModelInferRequest{ModelName: "ens_fail",
			Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{1}}},
			RawInputContents: [][]byte{ipctest.FP32(1)}})
		wantStatus(t, err, codes.Internal, "in ensemble 'ens_fail', Failed to process the request(s) for model 'execute_raises_0_0'")
		// The ensemble validates its own inputs first.
		code, body = s.httpInferJSON("ens_pipeline", map[string]any{"inputs": []map[string]any{{"name": "X", "shape": []int{1}, "datatype": "FP32", "data": []float32{1}}}})
		if msg := httpErrorText(t, body); code != http.StatusBadRequest || msg != "unexpected inference input 'X' for model 'ens_pipeline'" {
			t.Fatalf("%d %s", code, msg)
		}
	})

	// stepDies posts params to ens, which make one step's stub die, and
	// checks the 503 and that its text starts with want.
	stepDies := func(t *testing.T, ens string, params map[string]any, want string) {
		t.Helper()
		code, body := s.httpInferJSON(ens, ensFP32(params, nil, 1))
		if msg := httpErrorText(t, body); code != http.StatusServiceUnavailable || !strings.HasPrefix(msg, want) {
			t.Fatalf("%d %s", code, msg)
		}
	}
	// stepBack waits until step is ready again and checks that ens, fed
	// x, answers want (the steps double it).
	stepBack := func(t *testing.T, step, ens string, x float32, want string) {
		t.Helper()
		waitFor(t, 30*time.Second, step+" to be ready again", func() bool {
			code, _, _ := s.do("GET", "/v2/models/"+step+"/ready", nil)
			return code == http.StatusOK
		})
		if out := ensOutputs(t, s, ens, ensFP32(nil, nil, x)); out["OUTPUT0"] != want {
			t.Fatalf("after the restart: %v", out)
		}
	}

	t.Run("step killed mid-request", func(t *testing.T) {
		before := oneStub(t, s, "kill_self")
		stepDies(t, "ens_kill", map[string]any{"kill": true}, "in ensemble 'ens_kill', Stub process 'kill_self_0_0' of model 'kill_self' died while executing the request: signal: killed")
		if err := syscall.Kill(before.PID, 0); err == nil {
			t.Errorf("the killed stub %d still exists", before.PID)
		}
		stepBack(t, "kill_self", "ens_kill", 4, "[8]")
	})

	t.Run("step hung mid-request", func(t *testing.T) {
		// hang's EXECUTE_TIMEOUT_MS (1 s) kills its stub; the ensemble
		// request fails naming the step's model, instance and cause.
		stepDies(t, "ens_hang", map[string]any{"hang": true}, "in ensemble 'ens_hang', Stub process 'hang_0_0' of model 'hang' died while executing the request: execute ran longer than EXECUTE_TIMEOUT_MS=1000")
		stepBack(t, "hang", "ens_hang", 5, "[10]")
	})

	t.Run("statistics of the ensemble and its steps", func(t *testing.T) {
		models := []string{"ens_pipeline", "ens_scale", "go_identity_fp32", "ens_offset"}
		before := map[string][4]int{}
		for _, m := range models {
			before[m] = ensStats(t, s, m)
		}
		for i := range 3 {
			ensOutputs(t, s, "ens_pipeline", ensFP32(nil, nil, float32(i)))
		}
		for _, m := range models {
			b, a := before[m], ensStats(t, s, m)
			if a[0]-b[0] != 3 || a[1]-b[1] != 3 || a[2]-b[2] != 3 || a[3] != b[3] {
				t.Errorf("%s: stats %v -> %v, want 3 more inferences, executions and successes", m, b, a)
			}
		}
		f := ensStats(t, s, "ens_fail")
		if f[3] < 2 {
			t.Errorf("ens_fail: %d failures recorded, want at least 2", f[3])
		}
		text, _ := s.scrape()
		for _, m := range models {
			series := `nv_inference_request_success{model="` + m + `",version="1"}`
			if !strings.Contains(text, series) {
				t.Errorf("/metrics has no %s", series)
			}
		}
	})

	t.Run("status shows steps", func(t *testing.T) {
		var ms []struct {
			Model string `json:"model"`
			Stubs []any  `json:"stubs"`
			Steps []struct {
				Model   string   `json:"model"`
				Version string   `json:"version"`
				Inputs  []string `json:"inputs"`
				Outputs []string `json:"outputs"`
			} `json:"steps"`
		}
		s.getJSON("/v2/models/ens_pipeline/stubs", &ms)
		if len(ms) != 1 || len(ms[0].Steps) != 3 || len(ms[0].Stubs) != 0 {
			t.Fatalf("stubs view %+v", ms)
		}
		st := ms[0].Steps
		if st[0].Model != "ens_scale" || st[1].Model != "go_identity_fp32" || st[2].Model != "ens_offset" || st[0].Version != "latest" ||
			fmt.Sprint(st[0].Inputs) != "[INPUT0 -> INPUT0]" || fmt.Sprint(st[0].Outputs) != "[OUTPUT0 -> scaled]" {
			t.Fatalf("steps %+v", st)
		}
	})

	t.Run("nothing left in the arenas", func(t *testing.T) {
		ensPoolsIdle(t, s, "ens_scale", "go_identity_fp32", "ens_offset", "identity_fp32", "ens_join",
			"repeat_decoupled", "ens_int_scale", "execute_raises", "kill_self", "hang", "seq_accumulate")
	})
}

func TestEnsembleExplicit(t *testing.T) {
	s := startEnsembleServer(t)
	state := func(model string) string {
		var idx []struct {
			Name  string `json:"name"`
			State string `json:"state"`
		}
		code, body := s.postJSON("/v2/repository/index", map[string]any{})
		if code != http.StatusOK {
			t.Fatalf("index: %d %s", code, body)
		}
		if err := json.Unmarshal(body, &idx); err != nil {
			t.Fatal(err)
		}
		for _, e := range idx {
			if e.Name == model {
				return e.State
			}
		}
		t.Fatalf("%s is not in the index: %s", model, body)
		return ""
	}
	load := func(model string, params map[string]any) (int, string) {
		if params == nil {
			params = map[string]any{}
		}
		code, body := s.postJSON("/v2/repository/models/"+model+"/load", map[string]any{"parameters": params})
		return code, string(body)
	}
	unload := func(model string, dependents bool) {
		code, body := s.postJSON("/v2/repository/models/"+model+"/unload", map[string]any{"parameters": map[string]any{"unload_dependents": dependents}})
		if code != http.StatusOK {
			t.Fatalf("unload %s: %d %s", model, code, body)
		}
	}
	steps := []string{"ens_scale", "go_identity_fp32", "ens_offset"}

	if st := state("ens_pipeline"); st != "" {
		t.Fatalf("ens_pipeline is %q before any load", st)
	}
	// Loading the ensemble loads its composing models.
	if code, body := load("ens_pipeline", nil); code != http.StatusOK {
		t.Fatalf("load: %d %s", code, body)
	}
	for _, m := range append([]string{"ens_pipeline"}, steps...) {
		if st := state(m); st != "READY" {
			t.Fatalf("%s is %q after loading the ensemble", m, st)
		}
	}
	if out := ensOutputs(t, s, "ens_pipeline", ensFP32(nil, nil, 1)); out["OUTPUT0"] != "[3]" {
		t.Fatalf("infer: %v", out)
	}
	pid := oneStub(t, s, "ens_scale").PID

	// Unloading it leaves them loaded; loading it again reuses them.
	unload("ens_pipeline", false)
	if st := state("ens_pipeline"); st != "UNAVAILABLE" {
		t.Fatalf("ens_pipeline is %q after unload", st)
	}
	if code, _, _ := s.do("GET", "/v2/models/ens_pipeline/ready", nil); code == http.StatusOK {
		t.Fatal("ens_pipeline still ready after unload")
	}
	for _, m := range steps {
		if st := state(m); st != "READY" {
			t.Fatalf("%s is %q after unloading the ensemble alone", m, st)
		}
	}
	if code, body := load("ens_pipeline", nil); code != http.StatusOK {
		t.Fatalf("load again: %d %s", code, body)
	}
	if p := oneStub(t, s, "ens_scale").PID; p != pid {
		t.Errorf("ens_scale was restarted (pid %d -> %d) by loading the ensemble again", pid, p)
	}

	// With unload_dependents the composing models go too.
	unload("ens_pipeline", true)
	for _, m := range append([]string{"ens_pipeline"}, steps...) {
		if st := state(m); st != "UNAVAILABLE" {
			t.Fatalf("%s is %q after unload with unload_dependents", m, st)
		}
	}

	// A step mapping a tensor the model does not have fails the load with
	// Triton's text.
	bad := `{"name":"ens_fail","platform":"ensemble","input":[{"name":"INPUT0","data_type":"TYPE_FP32","dims":[-1]}],
		"output":[{"name":"OUTPUT0","data_type":"TYPE_FP32","dims":[-1]}],
		"ensemble_scheduling":{"step":[{"model_name":"execute_raises","model_version":-1,
		"input_map":{"NOPE":"INPUT0"},"output_map":{"OUTPUT0":"OUTPUT0"}}]}}`
	code, body := load("ens_fail", map[string]any{"config": bad})
	if want := "failed to load 'ens_fail': in ensemble ens_fail, ensemble tensor INPUT0 is mapping to non-existing input NOPE in model execute_raises"; code != http.StatusBadRequest || !strings.Contains(body, want) {
		t.Fatalf("load of a bad ensemble: %d %s, want 400 %q", code, body, want)
	}
	// So does a step naming a model the repository does not have.
	missing := strings.ReplaceAll(bad, `"execute_raises"`, `"no_such_model"`)
	code, body = load("ens_fail", map[string]any{"config": missing})
	if want := "ensemble 'ens_fail' depends on 'no_such_model' which has no loaded version"; code != http.StatusBadRequest || !strings.Contains(body, want) {
		t.Fatalf("load of an ensemble with a missing step model: %d %s, want 400 %q", code, body, want)
	}
}

// TestEnsembleSharedMemory: client shared memory at an ensemble's edges.
// The input is read from a client region by the first step; SUM is
// written into a region by the last step; SCALED, both an output and the
// input of two steps, is written into a region by the first step and read
// from there by the next two.
func TestEnsembleSharedMemory(t *testing.T) {
	s := startEnsembleServer(t, "--load-model", "ens_diamond", "--allow-client-shm=true")
	in := newClientRegion(t, "ens-in", 4096)
	out := newClientRegion(t, "ens-out", 4096)
	for name, key := range map[string]string{"ens_in": in.key, "ens_out": out.key} {
		if code, body := s.postJSON("/v2/systemsharedmemory/region/"+name+"/register", map[string]any{"key": key, "offset": 0, "byte_size": 4096}); code != http.StatusOK {
			t.Fatalf("register %s: %d %s", name, code, body)
		}
	}
	t.Cleanup(func() { s.postJSON("/v2/systemsharedmemory/unregister", nil) })
	copy(in.mem[64:], ipctest.FP32(1, 2, 3))
	code, body := s.httpInferJSON("ens_diamond", map[string]any{
		"inputs": []map[string]any{{"name": "INPUT0", "shape": []int{3}, "datatype": "FP32", "parameters": shmParams("ens_in", 64, 12)}},
		"outputs": []map[string]any{
			{"name": "SUM", "parameters": shmParams("ens_out", 0, 12)},
			{"name": "SCALED", "parameters": shmParams("ens_out", 100, 12)},
		},
	})
	r := httpDecodeInfer(t, code, http.Header{"Content-Type": {"application/json"}}, body)
	for _, o := range r.Outputs {
		if o.Data != nil {
			t.Errorf("output %s came back in the body: %+v", o.Name, o)
		}
	}
	if got := fmt.Sprint(ipctest.FP32s(out.mem[:12]), ipctest.FP32s(out.mem[100:112])); got != "[5 9 13] [2 4 6]" {
		t.Fatalf("SUM and SCALED in the region: %s, want [5 9 13] [2 4 6]", got)
	}
	ensPoolsIdle(t, s, "ens_scale", "identity_fp32", "ens_offset", "ens_join")
}
