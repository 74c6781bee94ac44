package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

func init() {
	register("soak", "mixed HTTP/gRPC load while stubs are killed at random; fails on any other failure or a leak", runSoak)
}

// soakConfig is identity_fp32 with two instances, so that a kill leaves
// the model served by the other one.
const soakConfig = `name: "identity_fp32"
backend: "python"
max_batch_size: 0
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]
instance_group [{ kind: KIND_CPU count: 2 }]
`

// inFlightFailure tells the failure of a request a killed stub held (the
// only failures a kill may cause) from any other.
func inFlightFailure(msg string) bool {
	return strings.Contains(msg, "died while executing the request") || strings.Contains(msg, "did not run")
}

// soakCounts are the server's resource counts, from its metrics.
type soakCounts struct{ rss, fds, goroutines float64 }

func (c soakCounts) String() string {
	return fmt.Sprintf("rss %.1f MiB, fds %.0f, goroutines %.0f", c.rss/(1<<20), c.fds, c.goroutines)
}

// soakRun is one soak: the server, its clients and the tallies.
type soakRun struct {
	srv     *benchServer
	scrape  *http.Client
	ok      atomic.Int64
	inFl    atomic.Int64 // failures of requests a killed stub held
	other   atomic.Int64
	kills   atomic.Int64
	mu      sync.Mutex
	perKill map[int64]int // kill number -> in-flight failures after it
	samples []string      // a few unexpected errors
}

func runSoak(args []string) error {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	sf := addServerFlags(fs)
	duration := fs.Duration("duration", 5*time.Minute, "how long the load runs")
	clients := fs.Int("clients", 4, "clients per protocol (HTTP and gRPC)")
	killEvery := fs.Duration("kill-every", 3*time.Second, "mean time between stub kills (uniform, 0.5x to 1.5x)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	env, err := newBenchEnv("soak", sf,
		benchModel{name: "add_sub", source: "add_sub"},
		benchModel{name: "identity_fp32", source: "identity_fp32", config: soakConfig})
	if err != nil {
		return err
	}
	defer env.close()
	srv, err := env.start("HTTP+gRPC+metrics", "--stub-restart-backoff", "50ms")
	if err != nil {
		return err
	}
	defer srv.stop()
	r := &soakRun{srv: srv, scrape: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}, perKill: map[int64]int{}}

	// Warm up (pools, stacks, the heap), then take the counts with no
	// client connected.
	if err := r.load(*clients, 3*time.Second, 0); err != nil {
		return err
	}
	start, err := r.settledCounts(soakCounts{})
	if err != nil {
		return err
	}
	r.ok.Store(0)
	r.inFl.Store(0)
	r.other.Store(0)
	fmt.Printf("soak: %s of load, %d HTTP + %d gRPC clients, a stub killed every ~%s\n", *duration, *clients, *clients, *killEvery)
	fmt.Printf("start: %s\n", start)
	recoveries := make(chan []time.Duration, 1)
	if err := r.load(*clients, *duration, *killEvery, recoveries); err != nil {
		return err
	}
	rec := <-recoveries
	end, err := r.settledCounts(start)
	if err != nil {
		return err
	}
	return r.report(start, end, rec)
}

// load runs the clients for d; with killEvery > 0 a killer ends a random
// stub now and then and reports the recovery times on recoveries.
func (r *soakRun) load(clients int, d, killEvery time.Duration, recoveries ...chan []time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	conn, err := grpc.NewClient(r.srv.addrs["gRPC"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	defer hc.CloseIdleConnections()
	var wg sync.WaitGroup
	for range clients {
		wg.Add(2)
		go func() { defer wg.Done(); r.httpClient(ctx, hc) }()
		go func() { defer wg.Done(); r.grpcClient(ctx, pb.NewGRPCInferenceServiceClient(conn)) }()
	}
	if killEvery > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); recoveries[0] <- r.killer(ctx, killEvery) }()
	}
	wg.Wait()
	return nil
}

var soakHTTPBody = []byte(`{"inputs":[{"name":"INPUT0","shape":[4],"datatype":"FP32","data":[1,2,3,4]},{"name":"INPUT1","shape":[4],"datatype":"FP32","data":[1,1,1,1]}]}`)

func (r *soakRun) httpClient(ctx context.Context, hc *http.Client) {
	url := "http://" + r.srv.addrs["HTTP"] + "/v2/models/add_sub/infer"
	for ctx.Err() == nil {
		resp, err := hc.Post(url, "application/json", bytes.NewReader(soakHTTPBody))
		if err != nil {
			r.fail(err.Error())
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			r.ok.Add(1)
			continue
		}
		var e struct{ Error string }
		_ = json.Unmarshal(body, &e)
		r.fail(fmt.Sprintf("HTTP %d: %s", resp.StatusCode, e.Error))
	}
}

func (r *soakRun) grpcClient(ctx context.Context, c pb.GRPCInferenceServiceClient) {
	req := &pb.ModelInferRequest{ModelName: "identity_fp32",
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{16}}},
		RawInputContents: [][]byte{fp32Bytes(16)}}
	for ctx.Err() == nil {
		// Not ctx: a request in flight when the load ends still counts.
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := c.ModelInfer(cctx, req)
		cancel()
		if err == nil {
			r.ok.Add(1)
			continue
		}
		r.fail("gRPC " + status.Convert(err).Code().String() + ": " + status.Convert(err).Message())
	}
}

// fail counts a failed request, in-flight at a kill or not.
func (r *soakRun) fail(msg string) {
	if inFlightFailure(msg) {
		r.inFl.Add(1)
		r.mu.Lock()
		r.perKill[r.kills.Load()]++
		r.mu.Unlock()
		return
	}
	r.other.Add(1)
	r.mu.Lock()
	if len(r.samples) < 5 {
		r.samples = append(r.samples, msg)
	}
	r.mu.Unlock()
}

// soakStub is one stub as /v2/stubs shows it.
type soakStub struct {
	Model, Instance, State string
	PID                    int
}

func (r *soakRun) stubs() ([]soakStub, error) {
	resp, err := r.scrape.Get("http://" + r.srv.addrs["HTTP"] + "/v2/stubs")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var models []struct {
		Model string
		Stubs []struct {
			Instance, State string
			PID             int
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&models); err != nil {
		return nil, err
	}
	var out []soakStub
	for _, m := range models {
		for _, s := range m.Stubs {
			out = append(out, soakStub{m.Model, s.Instance, s.State, s.PID})
		}
	}
	return out, nil
}

// killer SIGKILLs a random live stub every so often until ctx ends, and
// returns how long each took to be back (a new stub ready or busy).
func (r *soakRun) killer(ctx context.Context, every time.Duration) []time.Duration {
	var rec []time.Duration
	for {
		t := time.NewTimer(time.Duration(float64(every) * (0.5 + rand.Float64())))
		select {
		case <-ctx.Done():
			t.Stop()
			return rec
		case <-t.C:
		}
		all, err := r.stubs()
		if err != nil {
			continue
		}
		live := slices.DeleteFunc(all, func(s soakStub) bool { return s.PID == 0 })
		if len(live) == 0 {
			continue
		}
		victim := live[rand.IntN(len(live))]
		killed := time.Now()
		r.kills.Add(1)
		if syscall.Kill(victim.PID, syscall.SIGKILL) != nil {
			continue
		}
		for time.Since(killed) < 30*time.Second {
			back := false
			if all, err := r.stubs(); err == nil {
				for _, s := range all {
					if s.Instance == victim.Instance && s.PID != 0 && s.PID != victim.PID && (s.State == "ready" || s.State == "busy") {
						back = true
					}
				}
			}
			if back {
				rec = append(rec, time.Since(killed))
				break
			}
			time.Sleep(10 * time.Millisecond) // polling the status endpoint: nothing to wait on
		}
	}
}

// counts reads RSS, open fds and goroutines from the server's metrics.
func (r *soakRun) counts() (soakCounts, error) {
	resp, err := r.scrape.Get("http://" + r.srv.addrs["metrics"] + "/metrics")
	if err != nil {
		return soakCounts{}, err
	}
	defer resp.Body.Close()
	var c soakCounts
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		switch name {
		case "process_resident_memory_bytes":
			c.rss = v
		case "process_open_fds":
			c.fds = v
		case "go_goroutines":
			c.goroutines = v
		}
	}
	return c, sc.Err()
}

// settledCounts waits (up to 20 s) until every stub is up and the fd and
// goroutine counts are back to at most those of base (any, when base is
// zero), and returns the counts.
func (r *soakRun) settledCounts(base soakCounts) (soakCounts, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := r.counts()
		if err != nil {
			return c, err
		}
		all, err := r.stubs()
		up := err == nil
		for _, s := range all {
			up = up && (s.State == "ready" || s.State == "busy")
		}
		if up && (base == soakCounts{} || c.fds <= base.fds && c.goroutines <= base.goroutines) || time.Now().After(deadline) {
			return c, nil
		}
		time.Sleep(100 * time.Millisecond) // polling the metrics: nothing to wait on
	}
}

// report prints the tallies and fails on any failure but in-flight ones,
// or a count that grew (RSS beyond heap noise: half again plus 64 MiB).
func (r *soakRun) report(start, end soakCounts, rec []time.Duration) error {
	kills := r.kills.Load()
	fmt.Printf("requests: %d ok, %d failed in flight at a kill, %d failed otherwise\n", r.ok.Load(), r.inFl.Load(), r.other.Load())
	worst := 0
	for _, n := range r.perKill {
		worst = max(worst, n)
	}
	perKill := 0.0
	if kills > 0 {
		perKill = float64(r.inFl.Load()) / float64(kills)
	}
	fmt.Printf("kills: %d, failures per kill: mean %.2f, max %d\n", kills, perKill, worst)
	if len(rec) > 0 {
		slices.Sort(rec)
		fmt.Printf("recovery: p50 %s, max %s (%d measured)\n", rec[len(rec)/2].Round(time.Millisecond), rec[len(rec)-1].Round(time.Millisecond), len(rec))
	}
	fmt.Printf("end:   %s\n", end)
	var errs []error
	if n := r.other.Load(); n > 0 {
		errs = append(errs, fmt.Errorf("%d requests failed other than in flight at a kill, e.g. %q", n, r.samples))
	}
	if end.fds > start.fds {
		errs = append(errs, fmt.Errorf("open fds grew from %.0f to %.0f", start.fds, end.fds))
	}
	if end.goroutines > start.goroutines {
		errs = append(errs, fmt.Errorf("goroutines grew from %.0f to %.0f", start.goroutines, end.goroutines))
	}
	if end.rss > start.rss*1.5+64<<20 {
		errs = append(errs, fmt.Errorf("RSS grew from %.1f to %.1f MiB", start.rss/(1<<20), end.rss/(1<<20)))
	}
	if kills == 0 {
		errs = append(errs, errors.New("no stub was killed: run longer"))
	}
	return errors.Join(errs...)
}
