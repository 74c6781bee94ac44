package main

// The http benchmark: KServe v2 HTTP infer against bin/stubvisor with N
// keep-alive connections (one goroutine each), next to two yardsticks
// (http_yardsticks.go): a FastAPI server doing the same models' work
// in-process, what a Python user would write instead, and the floor, a
// plain net/http handler that reads the same request bodies and writes
// back the bodies stubvisor answered with. The ratios are what the
// targets are about; the floor absorbs the machine's HTTP and loopback
// cost. Every line also prints the CPU time per request of the server's
// process tree (server and stubs, uvicorn and its workers), which the
// machine's noise disturbs far less than throughput.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

func init() {
	register("http", "KServe v2 HTTP infer against bin/stubvisor, with a net/http echo yardstick", runHTTPBench)
}

// httpAddSub16 is add_sub with 16 elements per tensor (testdata's has 4),
// one instance; httpAddSubBatched is the same model under Triton's dynamic
// batcher, which hands the requests queued for the instance to one execute;
// httpAddSubMany keeps max_batch_size 0 and takes the queued requests with
// MAX_REQUESTS_PER_EXECUTE.
var (
	httpAddSub16      = addSubConfig("add_sub", "max_batch_size: 0", 1)
	httpAddSubBatched = addSubConfig("add_sub_batched", "max_batch_size: 64\ndynamic_batching {}", 1)
	httpAddSubMany    = addSubConfig("add_sub_many",
		"max_batch_size: 0\nparameters { key: \"MAX_REQUESTS_PER_EXECUTE\" value { string_value: \"64\" } }", 1)
	// httpAddSubCached answers from the response cache: every request of
	// its case is the same, so all but the first are hits that never reach
	// the stub (the server runs with a cache, --cache-config).
	httpAddSubCached = addSubConfig("add_sub_cached", "max_batch_size: 0\nresponse_cache { enable: true }", 1)
	// httpAddSubGo is add_sub as a Go-native model (testdata's go_add_sub)
	// with add_sub's config: the same request through the same server,
	// shared memory and stub process, without the Python interpreter. Its
	// ratio to the floor bounds what any work on the Python stub can bring.
	httpAddSubGo = strings.Replace(addSubConfig("add_sub_go", "max_batch_size: 0", 1),
		`backend: "python"`, `backend: "go"`, 1)
)

// httpCase is one benchmark case: a request replayed by conns callers.
type httpCase struct {
	name   string
	conns  int
	path   string
	body   []byte
	header http.Header
}

func httpCases() ([]httpCase, error) {
	vals := make([]float32, 16)
	strs := make([]string, 16)
	for i := range vals {
		vals[i] = float32(i) + 0.5
		strs[i] = fmt.Sprintf("string-%02d", i)
	}
	addSub, err := json.Marshal(map[string]any{"inputs": []map[string]any{
		{"name": "INPUT0", "shape": []int{16}, "datatype": "FP32", "data": vals},
		{"name": "INPUT1", "shape": []int{16}, "datatype": "FP32", "data": vals},
	}})
	if err != nil {
		return nil, err
	}
	addSubRow, err := json.Marshal(map[string]any{"inputs": []map[string]any{
		{"name": "INPUT0", "shape": []int{1, 16}, "datatype": "FP32", "data": vals},
		{"name": "INPUT1", "shape": []int{1, 16}, "datatype": "FP32", "data": vals},
	}})
	if err != nil {
		return nil, err
	}
	strings16, err := json.Marshal(map[string]any{"inputs": []map[string]any{
		{"name": "INPUT_STRING", "shape": []int{16}, "datatype": "BYTES", "data": strs},
	}})
	if err != nil {
		return nil, err
	}
	const n = 1 << 20 // 4 MiB of FP32
	hdr, err := json.Marshal(map[string]any{
		"inputs": []map[string]any{{"name": "INPUT0", "shape": []int{n}, "datatype": "FP32",
			"parameters": map[string]any{"binary_data_size": 4 * n}}},
		"parameters": map[string]any{"binary_data_output": true},
	})
	if err != nil {
		return nil, err
	}
	blob := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(blob[4*i:], math.Float32bits(float32(i)))
	}
	identity := append(hdr, blob...)
	jsonHdr := http.Header{"Content-Type": {"application/json"}}
	binHdr := http.Header{"Content-Type": {"application/octet-stream"},
		"Inference-Header-Content-Length": {strconv.Itoa(len(hdr))}}
	return []httpCase{
		{"add_sub-16xFP32-json-c1", 1, "/v2/models/add_sub/infer", addSub, jsonHdr},
		{"add_sub-16xFP32-json-c16", 16, "/v2/models/add_sub/infer", addSub, jsonHdr},
		{"add_sub-16xFP32-json-c64", 64, "/v2/models/add_sub/infer", addSub, jsonHdr},
		{"add_sub-16xFP32-json-c16-dynbatch", 16, "/v2/models/add_sub_batched/infer", addSubRow, jsonHdr},
		{"add_sub-16xFP32-json-c64-dynbatch", 64, "/v2/models/add_sub_batched/infer", addSubRow, jsonHdr},
		{"add_sub-16xFP32-json-c16-many", 16, "/v2/models/add_sub_many/infer", addSub, jsonHdr},
		{"add_sub-16xFP32-json-c64-many", 64, "/v2/models/add_sub_many/infer", addSub, jsonHdr},
		{"add_sub-16xFP32-json-c16-cachehit", 16, "/v2/models/add_sub_cached/infer", addSub, jsonHdr},
		{"add_sub-16xFP32-json-c1-gostub", 1, "/v2/models/add_sub_go/infer", addSub, jsonHdr},
		{"add_sub-16xFP32-json-c16-gostub", 16, "/v2/models/add_sub_go/infer", addSub, jsonHdr},
		{"identity-16xBYTES-json-c16", 16, "/v2/models/identity_all/infer", strings16, jsonHdr},
		{"identity-4MiB-binary-c1", 1, "/v2/models/identity_fp32/infer", identity, binHdr},
	}, nil
}

// httpTarget is one server a case is run against: its base URL and the
// pid whose process tree's CPU time it costs.
type httpTarget struct {
	name string
	url  string
	pid  int
}

func runHTTPBench(args []string) error {
	fs := flag.NewFlagSet("http", flag.ContinueOnError)
	duration := fs.Duration("duration", 2*time.Second, "measured time per case and round")
	rounds := fs.Int("rounds", 3, "rounds per case, alternating stubvisor and the yardsticks; medians are printed")
	warmup := fs.Duration("warmup", 500*time.Millisecond, "unmeasured time before each case")
	workers := fs.Int("fastapi-workers", 2, "uvicorn workers of the FastAPI yardstick (0 leaves it out)")
	sf := addServerFlags(fs)
	spin := fs.String("stub-spin", "", "passed to stubvisor --stub-spin when set (default: the server's default)")
	policy := fs.String("cpu-policy", "", "passed to stubvisor --cpu-policy when set (default: the server's default)")
	only := fs.String("case", "", "run only the cases whose name contains this (ending in $: whose name ends with it)")
	neighbours := fs.Int("neighbours", 0, "also run every case with this many CPU-bound neighbour processes beside each measurement")
	idle := fs.Duration("idle", 0, "when set, also measure an idle server (the -idle-models loaded) for this long and print its CPU and wake-ups")
	idleSet := fs.String("idle-models", idleModels, "the models of the idle measurement (make run's set)")
	quick := fs.Bool("quick", false, "shorter measurements (1 s, 300 ms warm-up) for a whole run in a few minutes")
	engine := fs.String("http-engine", "", "passed to stubvisor --http-engine when set (net/http or fasthttp)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *quick {
		*duration, *warmup = time.Second, 300*time.Millisecond
	}
	printWakeCost()
	extra := []string{"--cache-config", "local,size=1048576"}
	if *spin != "" {
		extra = append(extra, "--stub-spin", *spin)
	}
	if *policy != "" {
		extra = append(extra, "--cpu-policy", *policy)
	}
	if *engine != "" {
		extra = append(extra, "--http-engine", *engine)
	}
	env, err := newBenchEnv("http", sf,
		benchModel{"add_sub", "add_sub", httpAddSub16},
		benchModel{"add_sub_batched", "add_sub", httpAddSubBatched}, benchModel{"add_sub_many", "add_sub", httpAddSubMany},
		benchModel{"add_sub_cached", "add_sub", httpAddSubCached}, benchModel{"add_sub_go", "go_add_sub", httpAddSubGo},
		benchModel{"identity_fp32", "identity_fp32", ""},
		benchModel{"identity_all", "identity_all", ""}, benchModel{"token_gen", "token_gen", ""})
	if err != nil {
		return err
	}
	defer env.close()
	srv, err := env.start("HTTP+OpenAI", extra...)
	if err != nil {
		return err
	}
	defer srv.stop()
	var fastapi *yardProc
	if *workers > 0 {
		if fastapi, err = startFastAPI(env.python, *workers); err != nil {
			return err
		}
		defer fastapi.stop()
	}

	cases, err := httpCases()
	if err != nil {
		return err
	}
	for _, c := range cases {
		if !caseMatches(c.name, *only) {
			continue
		}
		run := caseRun{rounds: *rounds, warmup: *warmup, d: *duration, python: env.python}
		if err := runHTTPCase(c, srv, fastapi, run); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		if *neighbours > 0 {
			run.neighbours = *neighbours
			busy := c
			busy.name += fmt.Sprintf("-busy%d", *neighbours)
			if err := runHTTPCase(busy, srv, fastapi, run); err != nil {
				return fmt.Errorf("%s: %w", busy.name, err)
			}
		}
	}
	if *only == "" || strings.Contains("generate_stream-64tokens-c16", *only) {
		if err := runStreamCase(env, srv, *rounds, *warmup, *duration); err != nil {
			return fmt.Errorf("generate_stream: %w", err)
		}
	}
	if *only == "" || strings.Contains(openAIStreamCase, *only) {
		if err := runOpenAIStreamCase(srv, *rounds, *warmup, *duration); err != nil {
			return fmt.Errorf("%s: %w", openAIStreamCase, err)
		}
	}
	if *idle > 0 {
		srv.stop()
		if fastapi != nil {
			fastapi.stop()
		}
		if err := runIdle(env.bin, env.python, *idleSet, *idle); err != nil {
			return fmt.Errorf("idle: %w", err)
		}
	}
	return nil
}

// caseMatches reports whether the -case filter picks name: it contains
// the filter, or ends with it when the filter ends in "$" (so "json-c1$"
// is the c1 case alone, not c16 too).
func caseMatches(name, filter string) bool {
	if f, ok := strings.CutSuffix(filter, "$"); ok {
		return strings.HasSuffix(name, f)
	}
	return strings.Contains(name, filter)
}

// caseRun is how a case is measured: rounds of warmup then d per server,
// with neighbours CPU-bound processes beside each measurement (none: 0).
type caseRun struct {
	rounds     int
	warmup, d  time.Duration
	neighbours int
	python     string
}

// runHTTPCase runs one case against stubvisor, the FastAPI yardstick (when
// running) and the two floors (net/http and fasthttp) in alternating rounds and prints their medians
// and stubvisor's ratios to each: throughput (the median of the rounds'
// ratios), CPU time per request and p50 latency (of the medians).
func runHTTPCase(c httpCase, srv *benchServer, fastapi *yardProc, run caseRun) error {
	// The floor answers with exactly what stubvisor answered.
	canned, cannedHdr, err := httpOnce(http.DefaultClient, srv.url(), c)
	if err != nil {
		return err
	}
	floor, err := startHTTPFloor(canned, cannedHdr, "net/http")
	if err != nil {
		return err
	}
	defer floor.stop()
	fastFloor, err := startHTTPFloor(canned, cannedHdr, "fasthttp")
	if err != nil {
		return err
	}
	defer fastFloor.stop()
	targets := []httpTarget{{"", srv.url(), srv.cmd.Process.Pid}}
	if fastapi != nil {
		if _, _, err := httpOnce(http.DefaultClient, fastapi.url, c); err != nil {
			return fmt.Errorf("fastapi: %w", err)
		}
		targets = append(targets, httpTarget{"fastapi-", fastapi.url, fastapi.pid()})
	}
	targets = append(targets, httpTarget{"floor-", floor.url, floor.pid()}, httpTarget{"fastfloor-", fastFloor.url, fastFloor.pid()})
	sides := make([]func() (Stats, error), len(targets))
	for i, t := range targets {
		sides[i] = func() (Stats, error) {
			return withNeighbours(run.python, run.neighbours, run.warmup+run.d+time.Minute, func() (Stats, error) {
				return loadHTTP(t.url, t.pid, c, run.warmup, run.d)
			})
		}
	}
	medians, ratios, err := alternateAll(run.rounds, sides)
	if err != nil {
		return err
	}
	line := "http ratio " + c.name
	cpu := ""
	for i, t := range targets {
		printHTTP(t.name+c.name, medians[i])
		if i > 0 {
			name := strings.TrimSuffix(t.name, "-")
			line += fmt.Sprintf(" vs_%s=%.3f", name, ratios[i])
			if medians[i].CPUPerOp > 0 {
				cpu += fmt.Sprintf(" cpu_vs_%s=%.2f", name, float64(medians[0].CPUPerOp)/float64(medians[i].CPUPerOp))
			}
			if medians[i].P50 > 0 {
				cpu += fmt.Sprintf(" p50_vs_%s=%.2f", name, float64(medians[0].P50)/float64(medians[i].P50))
			}
		}
	}
	fmt.Println(line + cpu)
	// The two floors side by side: what the HTTP library alone changes.
	nf, ff := medians[len(targets)-2], medians[len(targets)-1]
	if nf.PerSecond > 0 && ff.CPUPerOp > 0 {
		fmt.Printf("http floors %s fasthttp_vs_nethttp rps=%.3f cpu=%.2f\n", c.name, ff.PerSecond/nf.PerSecond,
			float64(nf.CPUPerOp)/float64(ff.CPUPerOp))
	}
	return nil
}

// printHTTP prints one server's medians: throughput, latency, and what
// the server's process tree cost per request: CPU time, context switches
// (each one a sleep or a preemption of one of its threads) and time its
// threads waited for a CPU.
func printHTTP(name string, s Stats) {
	fmt.Printf("http %s rps=%.0f p50_us=%.1f p99_us=%.1f cpu_us_per_req=%.1f ctx_per_req=%.2f ctx_children_per_req=%.2f runq_us_per_req=%.1f\n", name, s.PerSecond,
		float64(s.P50)/float64(time.Microsecond), float64(s.P99)/float64(time.Microsecond),
		float64(s.CPUPerOp)/float64(time.Microsecond), s.CtxPerOp, s.ChildCtxPerOp, float64(s.RunqPerOp)/float64(time.Microsecond))
}

// httpOnce sends the case's request once and returns the 200 response.
func httpOnce(cl *http.Client, base string, c httpCase) ([]byte, http.Header, error) {
	req, err := http.NewRequest(http.MethodPost, base+c.path, bytes.NewReader(c.body))
	if err != nil {
		return nil, nil, err
	}
	req.Header = c.header
	resp, err := cl.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("status %d: %.300s", resp.StatusCode, b)
	}
	return b, resp.Header, nil
}

// loadHTTP replays the case from c.conns goroutines, each on its own
// keep-alive connection, for warmup (unmeasured) and then d, and charges
// the CPU time pid's process tree used while measured to the requests.
func loadHTTP(base string, pid int, c httpCase, warmup, d time.Duration) (Stats, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: c.conns, MaxConnsPerHost: c.conns, DisableCompression: true}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	start := time.Now()
	measureFrom, stopAt := start.Add(warmup), start.Add(warmup+d)
	var (
		mu       sync.Mutex
		samples  []time.Duration
		firstErr error
		wg       sync.WaitGroup
	)
	type usage struct {
		cpu   time.Duration
		sched schedUse
	}
	use0 := make(chan usage, 1)
	go func() {
		time.Sleep(time.Until(measureFrom))
		use0 <- usage{treeCPU(pid), treeSched(pid)}
	}()
	for range c.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			buf := new(bytes.Buffer)
			for {
				t0 := time.Now()
				if t0.After(stopAt) {
					break
				}
				req, err := http.NewRequest(http.MethodPost, base+c.path, bytes.NewReader(c.body))
				if err == nil {
					req.Header = c.header
					var resp *http.Response
					if resp, err = cl.Do(req); err == nil {
						buf.Reset()
						_, err = buf.ReadFrom(resp.Body)
						resp.Body.Close()
						if err == nil && resp.StatusCode != http.StatusOK {
							err = fmt.Errorf("status %d: %.300s", resp.StatusCode, buf.Bytes())
						}
					}
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				if t0.After(measureFrom) {
					mine = append(mine, time.Since(t0))
				}
			}
			mu.Lock()
			samples = append(samples, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	u0 := <-use0
	cpu, sched := treeCPU(pid)-u0.cpu, treeSched(pid).sub(u0.sched)
	if firstErr != nil {
		return Stats{}, firstErr
	}
	s := summarize(samples, len(samples), time.Since(measureFrom))
	if n := len(samples); n > 0 {
		s.CPUPerOp = cpu / time.Duration(n)
		s.CtxPerOp = float64(sched.switches) / float64(n)
		s.ChildCtxPerOp = float64(sched.childSwitches) / float64(n)
		s.RunqPerOp = sched.runq / time.Duration(n)
	}
	return s, nil
}
