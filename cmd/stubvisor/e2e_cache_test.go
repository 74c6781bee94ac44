package main

// The response cache end to end: testdata/models/cached_count (response_cache
// enabled; its CALLS output counts the requests it executed) behind a server
// started with --cache-config. A repeated request is answered from the cache:
// CALLS does not move, the statistics count no execution but a cache hit, and
// the nv_cache_* metrics say so.

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// cachedCall sends INPUT0 (inline, or from a registered region when
// region is set) and returns CALLS and OUTPUT0.
func cachedCall(t *testing.T, s *server, in []float32, params map[string]any, region string) (calls int64, out string) {
	t.Helper()
	input := map[string]any{"name": "INPUT0", "shape": []int{len(in)}, "datatype": "FP32"}
	if region != "" {
		input["parameters"] = shmParams(region, 0, 4*len(in))
	} else {
		input["data"] = in
	}
	req := map[string]any{"inputs": []map[string]any{input}}
	if params != nil {
		req["parameters"] = params
	}
	code, body := s.httpInferJSON("cached_count", req)
	if code != 200 {
		t.Fatalf("infer: %d %s", code, body)
	}
	var r httpResponse
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	var c []int64
	if err := json.Unmarshal(r.output(t, "CALLS").Data, &c); err != nil || len(c) != 1 {
		t.Fatalf("CALLS %s", r.output(t, "CALLS").Data)
	}
	return c[0], httpCanonJSON(t, r.output(t, "OUTPUT0").Data)
}

func TestResponseCache(t *testing.T) {
	ipctest.RequirePython(t)
	s := startServer(t, copyRepo(t, "cached_count"), "--cache-config", "local,size=1048576", "--allow-client-shm=true")
	steps := []struct {
		name   string
		in     []float32
		params map[string]any
		calls  int64 // CALLS in the answer: a hit repeats the cached one
	}{
		{"first request runs the model", []float32{1, 2}, nil, 1},
		{"same request is a hit", []float32{1, 2}, nil, 1},
		{"and again", []float32{1, 2}, nil, 1},
		{"other input bytes miss", []float32{1, 3}, nil, 2},
		{"other shape misses", []float32{1, 2, 0}, nil, 3},
		{"a request parameter is part of the key", []float32{1, 2}, map[string]any{"p": "x"}, 4},
		{"same parameter hits", []float32{1, 2}, map[string]any{"p": "x"}, 4},
		{"the first is still cached", []float32{1, 2}, nil, 1},
	}
	for _, st := range steps {
		calls, out := cachedCall(t, s, st.in, st.params, "")
		if calls != st.calls || out != httpCanonJSON(t, mustJSON(t, st.in)) {
			t.Errorf("%s: CALLS %d OUTPUT0 %s, want CALLS %d", st.name, calls, out, st.calls)
		}
	}
	t.Run("input in client shared memory", func(t *testing.T) {
		region := newClientRegion(t, "cache", 8)
		put := func(v []float32) {
			for i, f := range v {
				binary.LittleEndian.PutUint32(region.mem[4*i:], math.Float32bits(f))
			}
		}
		if code, body := s.postJSON("/v2/systemsharedmemory/region/cache_in/register", map[string]any{"key": region.key, "offset": 0, "byte_size": 8}); code != 200 {
			t.Fatalf("register: %d %s", code, body)
		}
		t.Cleanup(func() { s.postJSON("/v2/systemsharedmemory/region/cache_in/unregister", nil) })
		put([]float32{1, 2})
		if calls, _ := cachedCall(t, s, make([]float32, 2), nil, "cache_in"); calls != 1 {
			t.Errorf("the bytes of the first request, from shared memory: CALLS %d, want the cached 1", calls)
		}
		put([]float32{7, 8})
		if calls, out := cachedCall(t, s, make([]float32, 2), nil, "cache_in"); calls != 5 || out != "[7,8]" {
			t.Errorf("new bytes in the region: CALLS %d OUTPUT0 %s, want a miss (5) with [7,8]", calls, out)
		}
	})
	var stats struct {
		ModelStats []struct {
			ExecutionCount int `json:"execution_count"`
			InferenceStats struct {
				Success   struct{ Count int } `json:"success"`
				CacheHit  struct{ Count int } `json:"cache_hit"`
				CacheMiss struct{ Count int } `json:"cache_miss"`
			} `json:"inference_stats"`
		} `json:"model_stats"`
	}
	s.getJSON("/v2/models/cached_count/stats", &stats)
	if len(stats.ModelStats) != 1 {
		t.Fatalf("stats %+v", stats)
	}
	ms := stats.ModelStats[0]
	if ms.ExecutionCount != 5 || ms.InferenceStats.CacheHit.Count != 5 || ms.InferenceStats.CacheMiss.Count != 5 || ms.InferenceStats.Success.Count != 10 {
		t.Errorf("statistics: %+v, want 5 executions, 5 hits, 5 misses, 10 successes", ms)
	}
	text, _ := s.scrape()
	for _, line := range []string{
		`nv_cache_num_hits_per_model{model="cached_count",version="1"} 5`,
		`nv_cache_num_misses_per_model{model="cached_count",version="1"} 5`,
		`nv_inference_exec_count{model="cached_count",version="1"} 5`,
	} {
		if !strings.Contains(text, line) {
			t.Errorf("metrics lack %q", line)
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", text)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
