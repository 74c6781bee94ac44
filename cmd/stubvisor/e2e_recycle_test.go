package main

// Recycling and memory limits through the built binary: a model that
// leaks on purpose is replaced under load without a failed request,
// MAX_REQUESTS_PER_STUB replaces a stub exactly on its count, and a stub
// over MEMORY_LIMIT_MB is killed and reported as over its memory limit.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// recycleStatus is the part of a stub in /v2/stubs these tests read.
type recycleStatus struct {
	PID              int    `json:"pid"`
	State            string `json:"state"`
	Restarts         int    `json:"restarts"`
	Recycles         int    `json:"recycles"`
	LastRecycleCause string `json:"last_recycle_cause"`
	LastExitCause    string `json:"last_exit_cause"`
	MemoryLimit      string `json:"memory_limit"`
	RSS              uint64 `json:"rss_bytes"`
	Requests         uint64 `json:"requests"`
	LoadSteps        *struct {
		EnvironmentS      float64 `json:"environment_s"`
		InterpreterStartS float64 `json:"interpreter_start_s"`
		ImportsS          float64 `json:"imports_s"`
		InitializeS       float64 `json:"initialize_s"`
	} `json:"load_steps"`
}

func recycleStub(t *testing.T, s *server, model string) recycleStatus {
	t.Helper()
	var ms []struct {
		Stubs []recycleStatus `json:"stubs"`
	}
	s.getJSON("/v2/models/"+model+"/stubs", &ms)
	if len(ms) != 1 || len(ms[0].Stubs) != 1 {
		t.Fatalf("stubs of %s: %+v, want one", model, ms)
	}
	return ms[0].Stubs[0]
}

// leakRepo is the leak model with extra config parameters.
func leakRepo(t *testing.T, params map[string]string) string {
	t.Helper()
	repo := copyRepo(t, "leak")
	cfgPath := filepath.Join(repo, "leak", "config.pbtxt")
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range params {
		cfg = fmt.Appendf(cfg, "parameters { key: %q value { string_value: %q } }\n", k, v)
	}
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	return repo
}

// leakInfer sends one request to the leak model and reports whether it
// succeeded.
func leakInfer(s *server, mb int) (bool, string) {
	code, body := s.postJSONQuiet("/v2/models/leak/infer", map[string]any{
		"inputs": []map[string]any{{"name": "LEAK_MB", "datatype": "INT32", "shape": []int{1}, "data": []int{mb}}},
	})
	return code == 200, string(body)
}

// TestRecycleLeakingModelUnderLoad: the leak model's stub is recycled each
// time its RSS passes MAX_RSS_MB, while three clients keep it busy; over at
// least three recycles no request fails.
func TestRecycleLeakingModelUnderLoad(t *testing.T) {
	slow(t)
	ipctest.RequirePython(t)
	const maxRSS = 120
	s := startServer(t, leakRepo(t, map[string]string{"MAX_RSS_MB": fmt.Sprint(maxRSS)}))

	var ok, failed atomic.Int64
	var firstFailure atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	load := func(mb int, every time.Duration) {
		defer wg.Done()
		var tick <-chan time.Time
		if every > 0 {
			tk := time.NewTicker(every) // the leaker's pace: 4 MiB per 50 ms
			defer tk.Stop()
			tick = tk.C
		}
		for {
			select {
			case <-stop:
				return
			default:
			}
			if tick != nil {
				select {
				case <-tick:
				case <-stop:
					return
				}
			}
			if good, body := leakInfer(s, mb); good {
				ok.Add(1)
			} else {
				failed.Add(1)
				firstFailure.CompareAndSwap(nil, body)
			}
		}
	}
	wg.Add(4)
	go load(4, 50*time.Millisecond)
	for range 3 {
		go load(0, 0)
	}
	var st recycleStatus
	deadline := time.Now().Add(120 * time.Second)
	for st = recycleStub(t, s, "leak"); st.Recycles < 3; st = recycleStub(t, s, "leak") {
		if time.Now().After(deadline) || failed.Load() > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling /v2/stubs while the load runs
	}
	close(stop)
	wg.Wait()
	t.Logf("%d requests served, %d failed, %d recycles; last cause %q", ok.Load(), failed.Load(), st.Recycles, st.LastRecycleCause)
	if st.Recycles < 3 {
		t.Fatalf("%d recycles within 120s, want 3: %+v", st.Recycles, st)
	}
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d requests failed across the recycles; the first: %v", n, firstFailure.Load())
	}
	if !regexp.MustCompile(`^recycled: rss \d+\.\d [MG]iB > MAX_RSS_MB 120$`).MatchString(st.LastRecycleCause) {
		t.Errorf("recycle cause %q", st.LastRecycleCause)
	}
	if st.Restarts != 0 {
		t.Errorf("%d restarts: a recycle is not a restart", st.Restarts)
	}
	if c := strings.Count(s.Log(), "recycling stub"); c < 3 {
		t.Errorf("the log says %d times that a stub is recycled", c)
	}
	text, _ := s.scrape()
	m := regexp.MustCompile(`stubvisor_stub_recycles_total\{instance="leak_0_0",model="leak",version="1"\} (\d+)`).FindStringSubmatch(text)
	if m == nil || m[1] == "0" || m[1] == "1" || m[1] == "2" {
		t.Errorf("recycle counter %v, want at least 3", m)
	}
}

// pidModel answers each request with its stub's pid.
const pidModel = `import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.array([os.getpid()], dtype=np.float32))])
                for _ in requests]
`

// TestRecycleMaxRequestsExact: with MAX_REQUESTS_PER_STUB 5, requests 1-5
// run in one stub, 6-10 in the next, and so on; each old stub finalizes
// and exits.
func TestRecycleMaxRequestsExact(t *testing.T) {
	ipctest.RequirePython(t)
	repo := t.TempDir()
	writeFP32Model(t, repo, "pids", `instance_group [{ kind: KIND_CPU }]
parameters { key: "MAX_REQUESTS_PER_STUB" value { string_value: "5" } }`, pidModel)
	s := startServer(t, repo)
	var pids []int
	for i := 0; i < 16; i++ {
		code, body := s.httpInferJSON("pids", map[string]any{
			"inputs": []map[string]any{{"name": "INPUT0", "datatype": "FP32", "shape": []int{1}, "data": []float32{0}}},
		})
		if code != 200 {
			t.Fatalf("request %d: %d %s", i+1, code, body)
		}
		m := regexp.MustCompile(`"data":\[(\d+)(\.0)?\]`).FindStringSubmatch(string(body))
		if m == nil {
			t.Fatalf("request %d: %s", i+1, body)
		}
		var pid int
		fmt.Sscan(m[1], &pid)
		pids = append(pids, pid)
	}
	for i := range pids {
		sameAsGroupStart := pids[i] == pids[i-i%5]
		if !sameAsGroupStart || (i%5 == 0 && i > 0 && pids[i] == pids[i-1]) {
			t.Fatalf("stub pids by request: %v; want a new stub exactly every 5 requests", pids)
		}
	}
	var st recycleStatus
	waitFor(t, 30*time.Second, "the third recycle to show", func() bool {
		st = recycleStub(t, s, "pids")
		return st.Recycles == 3 && st.PID == pids[15]
	})
	if st.LastRecycleCause != "recycled: 5 requests >= MAX_REQUESTS_PER_STUB 5" || st.Requests != 1 {
		t.Errorf("stub after 16 requests: %+v", st)
	}
	if ls := st.LoadSteps; ls == nil || ls.InterpreterStartS <= 0 || ls.ImportsS <= 0 || ls.InitializeS < 0 || ls.EnvironmentS < 0 {
		t.Errorf("load steps %+v", ls)
	}
	for _, old := range []int{pids[0], pids[5], pids[10]} {
		waitFor(t, 30*time.Second, fmt.Sprintf("recycled stub %d to exit", old), func() bool {
			_, err := os.Stat(fmt.Sprintf("/proc/%d", old))
			return os.IsNotExist(err)
		})
	}
	if !strings.Contains(s.Log(), "imports_s=") {
		t.Errorf("the log does not time the load steps")
	}
}

// TestMemoryLimitOverLimit: a stub that allocates past MEMORY_LIMIT_MB is
// stopped by the kernel's limit and reported as over its memory limit,
// then restarted.
func TestMemoryLimitOverLimit(t *testing.T) {
	ipctest.RequirePython(t)
	s := startServer(t, leakRepo(t, map[string]string{"MEMORY_LIMIT_MB": "300"}), "--stub-restart-backoff", "50ms")
	before := recycleStub(t, s, "leak")
	if !regexp.MustCompile(`^300 MiB \((cgroup-v2|rlimit-data)\)$`).MatchString(before.MemoryLimit) {
		t.Fatalf("memory limit shown as %q", before.MemoryLimit)
	}
	if good, body := leakInfer(s, 8); !good {
		t.Fatalf("a request under the limit failed: %s", body)
	}
	good, body := leakInfer(s, 600)
	if good {
		t.Fatalf("a 600 MiB allocation under a 300 MiB limit succeeded: %s", body)
	}
	if !strings.Contains(body, "over memory limit: MEMORY_LIMIT_MB 300") {
		t.Errorf("the failed request does not say the stub went over its memory limit: %s", body)
	}
	var after recycleStatus
	waitFor(t, 30*time.Second, "the stub to come back", func() bool {
		after = recycleStub(t, s, "leak")
		return after.Restarts == 1 && after.State == "ready" && after.PID != before.PID
	})
	if !regexp.MustCompile(`^over memory limit: MEMORY_LIMIT_MB 300 \((cgroup-v2|rlimit-data)\)`).MatchString(after.LastExitCause) {
		t.Errorf("exit cause %q, want over memory limit", after.LastExitCause)
	}
	if good, body := leakInfer(s, 8); !good {
		t.Errorf("the restarted stub does not serve: %s", body)
	}
}

// postJSONQuiet is postJSON for load goroutines: it reports a transport
// failure as status 0 instead of failing the test from another goroutine.
func (s *server) postJSONQuiet(path string, v any) (int, []byte) {
	b, err := json.Marshal(v)
	if err != nil {
		return 0, []byte(err.Error())
	}
	resp, err := http.Post(s.HTTP+path, "application/json", bytes.NewReader(b))
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, []byte(err.Error())
	}
	return resp.StatusCode, body
}

// TestRecycleMaxStubAge: the server flag --max-stub-age-s recycles a stub
// once it is older, with the cause in /v2/stubs.
func TestRecycleMaxStubAge(t *testing.T) {
	slow(t)
	ipctest.RequirePython(t)
	s := startServer(t, copyRepo(t, "leak"), "--max-stub-age-s", "2")
	first := recycleStub(t, s, "leak")
	var st recycleStatus
	waitFor(t, 30*time.Second, "a recycle for age", func() bool {
		st = recycleStub(t, s, "leak")
		return st.Recycles >= 1 && st.PID != first.PID && st.State == "ready"
	})
	if !regexp.MustCompile(`^recycled: age [23]s > MAX_STUB_AGE_S 2$`).MatchString(st.LastRecycleCause) {
		t.Errorf("recycle cause %q", st.LastRecycleCause)
	}
	if good, body := leakInfer(s, 0); !good {
		t.Errorf("the replacement does not serve: %s", body)
	}
}
