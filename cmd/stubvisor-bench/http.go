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
	only := fs.String("case", "", "run only the cases whose name contains this")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var extra []string
	if *spin != "" {
		extra = append(extra, "--stub-spin", *spin)
	}
	env, err := newBenchEnv("http", sf,
		benchModel{"add_sub", "add_sub", httpAddSub16},
		benchModel{"add_sub_batched", "add_sub", httpAddSubBatched}, benchModel{"add_sub_many", "add_sub", httpAddSubMany},
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
		if *only != "" && !strings.Contains(c.name, *only) {
			continue
		}
		if err := runHTTPCase(c, srv, fastapi, *rounds, *warmup, *duration); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
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
	return nil
}

// runHTTPCase runs one case against stubvisor, the FastAPI yardstick (when
// running) and the floor in alternating rounds and prints their medians
// and stubvisor's median ratios to each.
func runHTTPCase(c httpCase, srv *benchServer, fastapi *yardProc, rounds int, warmup, d time.Duration) error {
	// The floor answers with exactly what stubvisor answered.
	canned, cannedHdr, err := httpOnce(http.DefaultClient, srv.url(), c)
	if err != nil {
		return err
	}
	floor, err := startHTTPFloor(canned, cannedHdr)
	if err != nil {
		return err
	}
	defer floor.stop()
	targets := []httpTarget{{"", srv.url(), srv.cmd.Process.Pid}}
	if fastapi != nil {
		if _, _, err := httpOnce(http.DefaultClient, fastapi.url, c); err != nil {
			return fmt.Errorf("fastapi: %w", err)
		}
		targets = append(targets, httpTarget{"fastapi-", fastapi.url, fastapi.pid()})
	}
	targets = append(targets, httpTarget{"floor-", floor.url, floor.pid()})
	sides := make([]func() (Stats, error), len(targets))
	for i, t := range targets {
		sides[i] = func() (Stats, error) { return loadHTTP(t.url, t.pid, c, warmup, d) }
	}
	medians, ratios, err := alternateAll(rounds, sides)
	if err != nil {
		return err
	}
	line := "http ratio " + c.name
	for i, t := range targets {
		printHTTP(t.name+c.name, medians[i])
		if i > 0 {
			line += fmt.Sprintf(" vs_%s=%.3f", strings.TrimSuffix(t.name, "-"), ratios[i])
		}
	}
	fmt.Println(line)
	return nil
}

func printHTTP(name string, s Stats) {
	fmt.Printf("http %s rps=%.0f p50_us=%.1f p99_us=%.1f cpu_us_per_req=%.1f\n", name, s.PerSecond,
		float64(s.P50)/float64(time.Microsecond), float64(s.P99)/float64(time.Microsecond),
		float64(s.CPUPerOp)/float64(time.Microsecond))
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
	cpu0 := make(chan time.Duration, 1)
	go func() {
		time.Sleep(time.Until(measureFrom))
		cpu0 <- treeCPU(pid)
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
	cpu := treeCPU(pid) - <-cpu0
	if firstErr != nil {
		return Stats{}, firstErr
	}
	s := summarize(samples, len(samples), time.Since(measureFrom))
	if len(samples) > 0 {
		s.CPUPerOp = cpu / time.Duration(len(samples))
	}
	return s, nil
}
