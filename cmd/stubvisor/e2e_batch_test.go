package main

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// modelStats is the part of GET /v2/models/<m>/stats the batching tests
// read.
type modelStats struct {
	ModelStats []struct {
		InferenceCount uint64 `json:"inference_count"`
		ExecutionCount uint64 `json:"execution_count"`
		BatchStats     []struct {
			BatchSize uint64 `json:"batch_size"`
		} `json:"batch_stats"`
	} `json:"model_stats"`
}

func TestDynamicBatcher(t *testing.T) {
	slow(t)
	ipctest.RequirePython(t)
	s := startServer(t, copyRepo(t, "batch_add", "batch_slow"))

	t.Run("requests are merged into one execute", func(t *testing.T) {
		// 16 requests of batch size 1 or 2 (24 elements) arrive together;
		// batch_add waits up to 100 ms to fill batches of 8.
		const n = 16
		var wg sync.WaitGroup
		results := make([]inferResult, n)
		sizes := make([]int, n)
		elements := 0
		for i := range n {
			sizes[i] = 1 + i%2
			elements += sizes[i]
			data := make([]float32, 2*sizes[i])
			for j := range data {
				data[j] = float32(i*10 + j)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = postInfer(s.HTTP, "batch_add", map[string]any{
					"inputs": []map[string]any{{"name": "INPUT0", "shape": []int{sizes[i], 2}, "datatype": "FP32", "data": data}},
				})
			}()
		}
		wg.Wait()
		merged := false
		for i, r := range results {
			if r.err != nil || r.code != http.StatusOK {
				t.Fatalf("request %d: %v %d %s", i, r.err, r.code, r.body)
			}
			var resp struct {
				Outputs []struct {
					Name  string    `json:"name"`
					Shape []int     `json:"shape"`
					Data  []float64 `json:"data"`
				} `json:"outputs"`
			}
			if err := json.Unmarshal(r.body, &resp); err != nil {
				t.Fatal(err)
			}
			for _, o := range resp.Outputs {
				switch o.Name {
				case "OUTPUT0":
					// Each request gets its own rows back, whatever it was
					// batched with.
					for j, v := range o.Data {
						if want := float64(i*10+j) + 1; v != want || len(o.Data) != 2*sizes[i] {
							t.Errorf("request %d OUTPUT0 = %v, want its input + 1", i, o.Data)
							break
						}
					}
				case "REQUESTS":
					if o.Data[0] > 1 {
						merged = true
					}
				}
			}
		}
		if !merged {
			t.Error("no execute held more than one request")
		}
		var st modelStats
		s.getJSON("/v2/models/batch_add/stats", &st)
		ms := st.ModelStats[0]
		if ms.InferenceCount != uint64(elements) {
			t.Errorf("inference_count = %d, want %d (batch elements)", ms.InferenceCount, elements)
		}
		if ms.ExecutionCount == 0 || ms.ExecutionCount >= n {
			t.Errorf("execution_count = %d for %d requests, want fewer executions than requests", ms.ExecutionCount, n)
		}
		for _, b := range ms.BatchStats {
			if b.BatchSize > 8 {
				t.Errorf("an execute held %d elements, more than max_batch_size 8", b.BatchSize)
			}
		}
	})

	t.Run("queue policies", func(t *testing.T) {
		slow := func(ms int, params map[string]any) inferResult {
			req := map[string]any{"inputs": []map[string]any{{"name": "DELAY_MS", "shape": []int{1, 1}, "datatype": "INT32", "data": []int{ms}}}}
			if params != nil {
				req["parameters"] = params
			}
			return postInfer(s.HTTP, "batch_slow", req)
		}
		// Two 1.2-second requests fill the stub: one running, one in its
		// pipeline. Everything after them waits in the batcher's queues.
		var busy sync.WaitGroup
		busyRes := make([]inferResult, 2)
		for i := range busyRes {
			busy.Add(1)
			go func() { defer busy.Done(); busyRes[i] = slow(1200, nil) }()
		}
		t.Cleanup(busy.Wait)
		waitInFlight(t, s, "batch_slow", 2, 10*time.Second, "both slow requests in the stub")

		t.Run("timeouts", func(t *testing.T) {
			tests := []struct {
				name   string
				params map[string]any
			}{
				{"priority level 2 default timeout", map[string]any{"priority": 2}},
				{"request timeout override", map[string]any{"timeout": 50000}},
			}
			var wg sync.WaitGroup
			res := make([]inferResult, len(tests))
			took := make([]time.Duration, len(tests))
			for i, tc := range tests {
				wg.Add(1)
				go func() {
					defer wg.Done()
					t0 := time.Now()
					res[i] = slow(1, tc.params)
					took[i] = time.Since(t0)
				}()
			}
			wg.Wait()
			for i, tc := range tests {
				r := res[i]
				if r.err != nil || r.code != http.StatusServiceUnavailable || errorText(r.body) != "Request timeout expired" {
					t.Errorf("%s: %v %d %s, want 503 Request timeout expired", tc.name, r.err, r.code, r.body)
				}
				if took[i] > time.Second {
					t.Errorf("%s: the timeout took %s, it should expire in the queue, not after the slow requests", tc.name, took[i])
				}
			}
		})

		t.Run("queue full", func(t *testing.T) {
			// Level 1 holds 2 waiting requests: of 3, one is refused.
			var wg sync.WaitGroup
			res := make([]inferResult, 3)
			for i := range res {
				wg.Add(1)
				go func() { defer wg.Done(); res[i] = slow(1, nil) }()
			}
			wg.Wait()
			full, ok := 0, 0
			for i, r := range res {
				switch {
				case r.err != nil:
					t.Errorf("request %d: %v", i, r.err)
				case r.code == http.StatusOK:
					ok++
				case r.code == http.StatusServiceUnavailable && errorText(r.body) == "Exceeds maximum queue size":
					full++
				default:
					t.Errorf("request %d: %d %s", i, r.code, r.body)
				}
			}
			if full != 1 || ok != 2 {
				t.Errorf("%d refused as full and %d served, want 1 and 2", full, ok)
			}
		})

		busy.Wait()
		for i, r := range busyRes {
			if r.err != nil || r.code != http.StatusOK {
				t.Errorf("slow request %d: %v %d %s", i, r.err, r.code, r.body)
			}
		}
		var st modelStats
		s.getJSON("/v2/models/batch_slow/stats", &st)
		if got := st.ModelStats[0].InferenceCount; got != 4 {
			t.Errorf("inference_count = %d, want 4 (2 slow + 2 queued)", got)
		}
	})
}
