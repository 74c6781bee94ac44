package main

// Warmup end to end: testdata/models/warm_lazy pays a 1 s lazy
// initialization in the first execute of each stub process; its
// model_warmup samples pay it before the model takes traffic, again after
// the stub is SIGKILLed and restarted. warm_fails' warmup sample fails,
// and with it the load, with Triton's text.

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// warmInfer sends one request to warm_lazy and returns its COLD and how
// long it took.
func warmInfer(t *testing.T, s *server) (cold int, took time.Duration) {
	t.Helper()
	start := time.Now()
	code, body := s.httpInferJSON("warm_lazy", map[string]any{"inputs": []map[string]any{
		{"name": "INPUT0", "shape": []int{1, 2}, "datatype": "FP32", "data": []float32{3, 4}}}})
	took = time.Since(start)
	if code != 200 {
		t.Fatalf("infer: %d %s", code, body)
	}
	var r httpResponse
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	var c []int
	if err := json.Unmarshal(r.output(t, "COLD").Data, &c); err != nil || len(c) != 1 {
		t.Fatalf("COLD %s", r.output(t, "COLD").Data)
	}
	return c[0], took
}

// warmStub is warm_lazy's stub with its warmup time from /v2/stubs, in
// milliseconds.
func warmStub(t *testing.T, s *server) (pid int, warmupMS float64) {
	t.Helper()
	var ms []struct {
		Stubs []struct {
			PID       int    `json:"pid"`
			State     string `json:"state"`
			LoadSteps struct {
				WarmupS float64 `json:"warmup_s"`
			} `json:"load_steps"`
		} `json:"stubs"`
	}
	s.getJSON("/v2/models/warm_lazy/stubs", &ms)
	if len(ms) != 1 || len(ms[0].Stubs) != 1 {
		t.Fatalf("stubs %+v", ms)
	}
	st := ms[0].Stubs[0]
	if st.State != "ready" {
		return 0, 0
	}
	return st.PID, 1000 * st.LoadSteps.WarmupS
}

func TestWarmup(t *testing.T) {
	slow(t)
	ipctest.RequirePython(t)
	s := startServer(t, copyRepo(t, "warm_lazy", "warm_fails"), "--log-verbose=1", "--model-control-mode=explicit", "--load-model=warm_lazy")
	// The lazy initialization takes 1 s; a request that pays it cannot
	// come in under this bound, one that does not easily does.
	const fast = 500 * time.Millisecond

	checkWarm := func(t *testing.T, what string) {
		t.Helper()
		var first, tenth time.Duration
		for i := 1; i <= 10; i++ {
			cold, took := warmInfer(t, s)
			if cold != 0 {
				t.Fatalf("%s: request %d ran the lazy initialization: warmup did not", what, i)
			}
			switch i {
			case 1:
				first = took
			case 10:
				tenth = took
			}
		}
		if first > fast {
			t.Errorf("%s: first request took %v (the tenth %v), want under %v", what, first, tenth, fast)
		}
		t.Logf("%s: first request %v, tenth %v", what, first, tenth)
	}

	pid, warmupMS := warmStub(t, s)
	if warmupMS < 1000 {
		t.Errorf("/v2/stubs shows a warmup of %v ms, want the 1 s lazy initialization in it", warmupMS)
	}
	checkWarm(t, "after load")
	log := s.Log()
	for _, want := range []string{
		"model 'warm_lazy' instance warm_lazy_0_0 is running warmup sample 'zeros' for iteration 1",
		"model 'warm_lazy' instance warm_lazy_0_0 is running warmup sample 'from file' for iteration 2",
		// zero_data, batch_size 2: two requests of batch size 1 in one
		// execution, as in Triton.
		"warm_lazy: request 1 of 2: shape [1, 2] sum 0.0",
		"warm_lazy: request 2 of 2: shape [1, 2] sum 0.0",
		"warm_lazy: request 1 of 1: shape [1, 2] sum 4.0", // input_data_file warmup/input0.bin: 1.5, 2.5
		"stub ready: pid=",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	// The warmup requests count in the statistics as in Triton, whose
	// backends report them like any other: "zeros" is one execution of two
	// requests, "from file" two of one; with them the warmup's time (the
	// 1 s lazy initialization) shows in compute_infer.
	var stats struct {
		ModelStats []struct {
			InferenceCount int `json:"inference_count"`
			ExecutionCount int `json:"execution_count"`
			InferenceStats struct {
				Success      struct{ Count, NS int64 } `json:"success"`
				ComputeInfer struct{ Count, NS int64 } `json:"compute_infer"`
			} `json:"inference_stats"`
		} `json:"model_stats"`
	}
	s.getJSON("/v2/models/warm_lazy/stats", &stats)
	if len(stats.ModelStats) != 1 {
		t.Fatalf("statistics %+v", stats)
	}
	st := stats.ModelStats[0]
	if st.ExecutionCount != 10+3 || st.InferenceCount != 10+4 || st.InferenceStats.Success.Count != 10+4 {
		t.Errorf("statistics %+v: want 13 executions and 14 inferences: the 10 requests' and the warmup's", st)
	}
	if st.InferenceStats.ComputeInfer.NS < int64(time.Second) {
		t.Errorf("compute_infer %+v: want the warmup's 1 s in it", st.InferenceStats.ComputeInfer)
	}
	if text, _ := s.scrape(); !strings.Contains(text, `nv_inference_count{model="warm_lazy",version="1"} 14`+"\n") ||
		!strings.Contains(text, `nv_inference_exec_count{model="warm_lazy",version="1"} 13`+"\n") {
		t.Errorf("metrics lack the warmup's inferences and executions:\n%s", text)
	}

	t.Run("a restarted stub is warmed up before it takes traffic", func(t *testing.T) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "a new warmed-up stub", func() bool {
			p, _ := warmStub(t, s)
			return p != 0 && p != pid
		})
		if _, ms := warmStub(t, s); ms < 1000 {
			t.Errorf("the new stub's warmup took %v ms, want over 1000", ms)
		}
		checkWarm(t, "after SIGKILL")
	})

	t.Run("a failing warmup fails the load", func(t *testing.T) {
		code, body := s.postJSON("/v2/repository/models/warm_fails/load", map[string]any{})
		want := "failed to load 'warm_fails': failed to run warmup sample 'zero sample': An Error Occurred; "
		if code == 200 || httpErrorText(t, body) != want {
			t.Errorf("load: %d %s, want %q", code, body, want)
		}
		if code, _, _ := s.do("GET", "/v2/models/warm_fails/ready", nil); code == 200 {
			t.Error("warm_fails is ready")
		}
	})
}
