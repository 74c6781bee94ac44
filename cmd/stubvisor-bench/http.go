package main

// The http benchmark: KServe v2 HTTP infer against bin/stubvisor with N
// keep-alive connections (one goroutine each), next to a yardstick: a
// plain net/http handler on the same machine that reads the same request
// bodies and writes back the bodies stubvisor answered with. The ratio of
// the two is what the targets are about; the yardstick absorbs the
// machine's HTTP and loopback cost.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

func init() {
	register("http", "KServe v2 HTTP infer against bin/stubvisor, with a net/http echo yardstick", runHTTPBench)
}

// httpAddSub16 is add_sub with 16 elements per tensor (testdata's has 4).
const httpAddSub16 = `name: "add_sub"
backend: "python"
max_batch_size: 0
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] }
]
instance_group [{ kind: KIND_CPU }]
`

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
	for i := range vals {
		vals[i] = float32(i) + 0.5
	}
	addSub, err := json.Marshal(map[string]any{"inputs": []map[string]any{
		{"name": "INPUT0", "shape": []int{16}, "datatype": "FP32", "data": vals},
		{"name": "INPUT1", "shape": []int{16}, "datatype": "FP32", "data": vals},
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
		{"identity-4MiB-binary-c1", 1, "/v2/models/identity_fp32/infer", identity, binHdr},
	}, nil
}

func runHTTPBench(args []string) error {
	fs := flag.NewFlagSet("http", flag.ContinueOnError)
	duration := fs.Duration("duration", 2*time.Second, "measured time per case and round")
	rounds := fs.Int("rounds", 3, "rounds per case, alternating stubvisor and the yardstick; medians are printed")
	warmup := fs.Duration("warmup", 500*time.Millisecond, "unmeasured time before each case")
	sf := addServerFlags(fs)
	only := fs.String("case", "", "run only the cases whose name contains this")
	if err := fs.Parse(args); err != nil {
		return err
	}
	env, err := newBenchEnv("http", sf,
		benchModel{"add_sub", "add_sub", httpAddSub16}, benchModel{"identity_fp32", "identity_fp32", ""})
	if err != nil {
		return err
	}
	defer env.close()
	srv, err := env.start("HTTP")
	if err != nil {
		return err
	}
	defer srv.stop()

	cases, err := httpCases()
	if err != nil {
		return err
	}
	for _, c := range cases {
		if *only != "" && !strings.Contains(c.name, *only) {
			continue
		}
		// The yardstick answers with exactly what stubvisor answered.
		canned, cannedHdr, err := httpOnce(http.DefaultClient, srv.url(), c)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		yBase, stopY, err := startHTTPYardstick(canned, cannedHdr)
		if err != nil {
			return err
		}
		s, y, ratio, err := alternate(*rounds,
			func() (Stats, error) { return loadHTTP(srv.url(), c, *warmup, *duration) },
			func() (Stats, error) { return loadHTTP(yBase, c, *warmup, *duration) })
		stopY()
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		printHTTP(c.name, s)
		printHTTP("yardstick-"+c.name, y)
		fmt.Printf("http ratio %s/yardstick=%.3f\n", c.name, ratio)
	}
	return nil
}

func printHTTP(name string, s Stats) {
	fmt.Printf("http %s rps=%.0f p50_us=%.1f p99_us=%.1f\n", name, s.PerSecond,
		float64(s.P50)/float64(time.Microsecond), float64(s.P99)/float64(time.Microsecond))
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
// keep-alive connection, for warmup (unmeasured) and then d.
func loadHTTP(base string, c httpCase, warmup, d time.Duration) (Stats, error) {
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
	if firstErr != nil {
		return Stats{}, firstErr
	}
	return summarize(samples, len(samples), time.Since(measureFrom)), nil
}

// startHTTPYardstick serves a handler that reads each request body in full
// and answers with body and the headers stubvisor sent.
func startHTTPYardstick(body []byte, h http.Header) (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	ct, ihl := h.Get("Content-Type"), h.Get("Inference-Header-Content-Length")
	var pool = sync.Pool{New: func() any { return new(bytes.Buffer) }}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := pool.Get().(*bytes.Buffer)
		buf.Reset()
		_, _ = buf.ReadFrom(r.Body)
		pool.Put(buf)
		w.Header().Set("Content-Type", ct)
		if ihl != "" {
			w.Header().Set("Inference-Header-Content-Length", ihl)
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	})}
	go func() { _ = hs.Serve(l) }()
	return "http://" + l.Addr().String(), func() { _ = hs.Close() }, nil
}
