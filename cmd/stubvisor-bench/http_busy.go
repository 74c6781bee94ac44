package main

// The http benchmark's two other conditions: a busy machine (CPU-bound
// neighbour processes running beside each measurement) and an idle server
// (what its process tree costs while no request comes).

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// neighbourScript is a CPU-bound neighbour: a Python loop that never
// sleeps, at the bench's own nice level, like another pod's busy worker.
const neighbourScript = "while 1: pass"

// withNeighbours runs measure with n CPU-bound neighbour processes beside
// it, started first and killed when it returns. Each is bounded by limit
// (killed by its context then at the latest) so none outlives a failed
// run.
func withNeighbours(python string, n int, limit time.Duration, measure func() (Stats, error)) (Stats, error) {
	if n <= 0 {
		return measure()
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var cmds []*exec.Cmd
	defer func() {
		cancel()
		for _, c := range cmds {
			_ = c.Wait()
		}
	}()
	for range n {
		c := exec.CommandContext(ctx, python, "-c", neighbourScript)
		if err := c.Start(); err != nil {
			return Stats{}, fmt.Errorf("neighbour: %w", err)
		}
		cmds = append(cmds, c)
	}
	return measure()
}

// idleModels are the models `make run` loads (the Makefile passes its
// RUN_MODELS list as -idle-models).
const idleModels = "add_sub identity_fp32 identity_all repeat_decoupled auto_complete error_codes batch_add seq_accumulate custom_metrics go_minimal go_repeat token_gen tiny_lm tiny_embed"

// idleRequest is one add_sub request as testdata's model takes it.
const idleRequest = `{"inputs":[{"name":"INPUT0","shape":[4],"datatype":"FP32","data":[1,2,3,4]},{"name":"INPUT1","shape":[4],"datatype":"FP32","data":[1,2,3,4]}]}`

// runIdle starts the server on testdata's repository with models loaded
// (as `make run` does), sends 20 requests, lets it settle, and prints what
// its whole process tree (server and stubs) used over window: CPU time as
// a share of one core, and context switches (wake-ups) per second.
func runIdle(bin, python, models string, window time.Duration) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	extra := []string{"--python", python, "--model-control-mode", "explicit"}
	names := strings.Fields(models)
	for _, m := range names {
		extra = append(extra, "--load-model", m)
	}
	cache, err := os.MkdirTemp("", "stubvisor-bench-idle-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(cache)
	srv, err := startBenchServer(bin, filepath.Join(root, "testdata", "models"), cache, "HTTP", extra...)
	if err != nil {
		return err
	}
	defer srv.stop()
	cl := &http.Client{Timeout: 10 * time.Second}
	for range 20 {
		resp, err := cl.Post(srv.url()+"/v2/models/add_sub/infer", "application/json", bytes.NewReader([]byte(idleRequest)))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("idle: add_sub answered %d", resp.StatusCode)
		}
	}
	cl.CloseIdleConnections()
	time.Sleep(2 * time.Second) // let the last request's work and the stubs' polls end
	pid := srv.cmd.Process.Pid
	u0, t0 := treeSched(pid), time.Now()
	time.Sleep(window) // the measurement: the server is left alone
	u, el := treeSched(pid).sub(u0), time.Since(t0)
	fmt.Printf("http idle models=%d processes=%d window_s=%.0f cpu_pct_of_core=%.3f wakeups_per_s=%.1f\n",
		len(names), len(treePIDs(pid)), el.Seconds(), 100*u.onCPU.Seconds()/el.Seconds(), float64(u.switches)/el.Seconds())
	return nil
}
