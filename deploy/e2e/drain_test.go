package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

// result is one request of a load run.
type result struct {
	start, end time.Time
	target     string // the base URL or gRPC address it went to
	err        error  // nil: success with the right output
}

// sender sends one slow_add request with input x and returns where it
// went and its error.
type sender func(x float32) (target string, err error)

// httpSender sends over HTTP to the base URL pick returns.
func httpSender(pick func() string) sender {
	client := &http.Client{Timeout: 30 * time.Second}
	return func(x float32) (string, error) {
		target := pick()
		return target, inferSlowAdd(client, target, x)
	}
}

// grpcSender sends over gRPC to addr, on a connection of its own.
func grpcSender(t *testing.T, addr string) sender {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	client := pb.NewGRPCInferenceServiceClient(conn)
	return func(x float32) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := client.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "slow_add",
			Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{1},
				Contents: &pb.InferTensorContents{Fp32Contents: []float32{x}}}}})
		if err != nil {
			return addr, err
		}
		if raw := resp.GetRawOutputContents(); len(raw) != 1 || len(raw[0]) != 4 ||
			math.Float32frombits(binary.LittleEndian.Uint32(raw[0])) != x+1 {
			return addr, fmt.Errorf("gRPC output %v for input %g", raw, x)
		}
		return addr, nil
	}
}

// load runs each sender in a goroutine of its own, sending one request
// after another until stop is closed, and returns every request's result.
func load(senders []sender, stop <-chan struct{}, done *atomic.Int64) []result {
	var mu sync.Mutex
	var all []result
	var wg sync.WaitGroup
	for w, send := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r := result{start: time.Now()}
				r.target, r.err = send(float32(w*100000 + i))
				r.end = time.Now()
				if r.err == nil {
					done.Add(1)
				}
				mu.Lock()
				all = append(all, r)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return all
}

// inferSlowAdd sends one slow_add request and checks its output.
func inferSlowAdd(client *http.Client, base string, x float32) error {
	body := fmt.Sprintf(`{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","data":[%g]}]}`, x)
	resp, err := client.Post(base+"/v2/models/slow_add/infer", "application/json", bytes.NewBufferString(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var out struct {
		Outputs []struct {
			Data []float32 `json:"data"`
		} `json:"outputs"`
		Error string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return fmt.Errorf("status %d: %w", resp.StatusCode, err)
	}
	if resp.StatusCode != 200 || len(out.Outputs) != 1 || len(out.Outputs[0].Data) != 1 || out.Outputs[0].Data[0] != x+1 {
		return fmt.Errorf("status %d: %+v", resp.StatusCode, out)
	}
	return nil
}

// drainArgs are the KServe arguments with the shutdown settings the
// chart uses, shortened for the test.
var drainArgs = append(append([]string{}, kserveArgs...), "--exit-timeout-secs=10", "--drain-delay-secs=2")

const exitTimeout = 10 * time.Second

// TestImageSIGTERMUnderLoad: SIGTERM (as Kubernetes sends it to a pod
// that is deleted) turns readiness false at once; every request sent
// before it, over HTTP or gRPC, succeeds, and so does every request sent during the drain
// delay; the container exits 0 within --exit-timeout-secs.
func TestImageSIGTERMUnderLoad(t *testing.T) {
	c := runContainer(t, modelRepo(t, "slow_add"), hardened, drainArgs)
	stop := make(chan struct{})
	var done atomic.Int64
	results := make(chan []result, 1)
	var senders []sender
	for range 3 {
		senders = append(senders, httpSender(func() string { return c.HTTP }), grpcSender(t, c.GRPC))
	}
	go func() { results <- load(senders, stop, &done) }()
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop)
			<-results
		}
	})
	waitFor(t, 30*time.Second, "20 requests to succeed", func() bool { return done.Load() >= 20 })

	sigterm := time.Now()
	mustPodman(t, "kill", "--signal", "TERM", c.name)
	waitFor(t, time.Second, "readiness to turn false", func() bool {
		code, _, err := httpDo("GET", c.HTTP+"/v2/health/ready", nil)
		return err == nil && code != 200
	})
	out, err := podman(t, exitTimeout+30*time.Second, "wait", c.name)
	exited := time.Since(sigterm)
	close(stop)
	all := <-results
	if err != nil || strings.TrimSpace(out) != "0" {
		t.Errorf("podman wait: exit status %q, %v", strings.TrimSpace(out), err)
	}
	if exited > exitTimeout+time.Second {
		t.Errorf("the container exited %v after SIGTERM, past --exit-timeout-secs=10", exited)
	}

	var before, during, duringOK, failedBefore, grpcBefore int
	for _, r := range all {
		switch {
		case r.start.Before(sigterm):
			before++
			if r.target == c.GRPC {
				grpcBefore++
			}
			if r.err != nil {
				failedBefore++
				t.Errorf("a request sent %v before SIGTERM failed: %v", sigterm.Sub(r.start), r.err)
			}
		case r.start.Before(sigterm.Add(2 * time.Second)):
			during++
			if r.err == nil {
				duringOK++
			}
		}
	}
	t.Logf("SIGTERM to exit: %v; %d requests sent before SIGTERM (%d over gRPC), %d failed; %d sent in the 2 s drain delay, %d served",
		exited.Round(time.Millisecond), before, grpcBefore, failedBefore, during, duringOK)
	if grpcBefore == 0 || grpcBefore == before {
		t.Errorf("the load was not HTTP and gRPC together: %d of %d requests over gRPC", grpcBefore, before)
	}
	if during == 0 || duringOK == 0 {
		t.Errorf("no request was served during the drain delay (%d sent)", during)
	}
}

// TestImageRollingRestart replaces one container by another under load,
// as a Deployment's rolling update does behind a Service: the client
// sends each request to an endpoint that its readiness poll (every
// 100 ms, as an endpoints controller would) last saw ready. No request
// fails.
func TestImageRollingRestart(t *testing.T) {
	repo := modelRepo(t, "slow_add")
	old := runContainer(t, repo, hardened, drainArgs)
	var mu sync.Mutex
	ready := map[string]bool{old.HTTP: true}
	var next atomic.Int64
	pick := func() string {
		mu.Lock()
		defer mu.Unlock()
		var eps []string
		for ep, ok := range ready {
			if ok {
				eps = append(eps, ep)
			}
		}
		if len(eps) == 0 {
			return old.HTTP
		}
		return eps[int(next.Add(1))%len(eps)]
	}
	stop := make(chan struct{})
	pollStop := make(chan struct{})
	var pollWG sync.WaitGroup
	poll := func(ep string) {
		defer pollWG.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-pollStop:
				return
			case <-tick.C:
			}
			code, _, err := httpDo("GET", ep+"/v2/health/ready", nil)
			mu.Lock()
			ready[ep] = err == nil && code == 200
			mu.Unlock()
		}
	}
	pollWG.Add(1)
	go poll(old.HTTP)
	var done atomic.Int64
	results := make(chan []result, 1)
	var senders []sender
	for range 6 {
		senders = append(senders, httpSender(pick))
	}
	go func() { results <- load(senders, stop, &done) }()
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop)
			<-results
		}
		close(pollStop)
		pollWG.Wait()
	})
	waitFor(t, 30*time.Second, "20 requests to succeed", func() bool { return done.Load() >= 20 })

	replacement := runContainer(t, repo, hardened, drainArgs)
	pollWG.Add(1)
	go poll(replacement.HTTP)
	waitFor(t, 10*time.Second, "the new container to take requests", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ready[replacement.HTTP]
	})
	mustPodman(t, "kill", "--signal", "TERM", old.name)
	if _, err := podman(t, exitTimeout+30*time.Second, "wait", old.name); err != nil {
		t.Fatal(err)
	}
	served := done.Load()
	waitFor(t, 30*time.Second, "20 more requests to succeed", func() bool { return done.Load() >= served+20 })
	close(stop)
	all := <-results

	failed := 0
	perTarget := map[string]int{}
	for _, r := range all {
		perTarget[r.target]++
		if r.err != nil {
			failed++
			t.Errorf("request to %s failed: %v", r.target, r.err)
		}
	}
	t.Logf("rolling restart: %d requests (%d to the old container, %d to the new), %d failed",
		len(all), perTarget[old.HTTP], perTarget[replacement.HTTP], failed)
}
