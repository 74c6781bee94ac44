package main

// Fault tests of the stub processes: what an operator does to them (kill
// -9, hung models, SIGTERM mid-work) and what the server promises back.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// A model that starts helper processes (an exec'd program and a forked
// Python child, as subprocess and multiprocessing do) holds the stub's
// stdout and stderr open through them. Killing the stub must still answer
// its request at once, the helpers must not inherit the stub's ignored
// SIGTERM/SIGINT, and they must end with the stub's process group.
func TestFaultStubWithHelperChildKilled(t *testing.T) {
	ipctest.RequirePython(t)
	repo := t.TempDir()
	pids := filepath.Join(t.TempDir(), "helpers")
	modelPy := `
import json, os, subprocess, time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        helper = subprocess.Popen(["sleep", "300"])
        child = os.fork()
        if child == 0:
            time.sleep(300)
            os._exit(0)
        with open(` + strconv.Quote(pids) + `, "a") as f:
            f.write("%d %d\n" % (helper.pid, child))
` + faultSleepExecute
	writeFP32Model(t, repo, "with_helper", "", modelPy)
	var helpers []int
	t.Cleanup(func() { // whatever the outcome, leave nothing behind
		for _, pid := range helpers {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	readHelpers := func() {
		b, _ := os.ReadFile(pids)
		helpers = helpers[:0]
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				helpers = append(helpers, pid)
			}
		}
	}
	s := startServer(t, repo, "--stub-restart-backoff", "50ms")
	readHelpers()
	if len(helpers) != 2 {
		t.Fatalf("helpers written: %v", helpers)
	}
	for _, pid := range helpers {
		if m := ignoredSignals(t, pid); m&(1<<(syscall.SIGTERM-1)|1<<(syscall.SIGINT-1)) != 0 {
			t.Errorf("helper %d ignores SIGTERM or SIGINT (SigIgn %x): a model could not stop it", pid, m)
		}
	}
	pid, _ := stubOf(t, s, "with_helper", "with_helper_0")
	done := make(chan timedInfer, 1)
	go func() { done <- timedPost(s.HTTP, "with_helper", sleepRequest(30)) }()
	waitInFlight(t, s, "with_helper", 1, 10*time.Second, "the request to run")
	time.Sleep(100 * time.Millisecond) // let execute start sleeping; the kill below is the event under test
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.code != http.StatusServiceUnavailable || !strings.Contains(errorText(r.body), "signal: killed") {
			t.Errorf("request on the killed stub: %d %s %v, want 503 naming the kill", r.code, r.body, r.err)
		}
		if took := time.Since(killed); took > time.Second {
			t.Errorf("reply %s after the kill, want within 1s", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no reply 10s after the stub was killed")
	}
	for _, h := range helpers[:2] {
		waitFor(t, 5*time.Second, fmt.Sprintf("helper %d of the killed stub to end", h), func() bool { return !processAlive(h) })
	}
	waitFor(t, 30*time.Second, "the restarted stub", func() bool {
		r := postInfer(s.HTTP, "with_helper", sleepRequest(0))
		return r.err == nil && r.code == 200
	})
	readHelpers()
	s.Stop()
	// The stub's process group is killed as the server stops; a killed
	// process may take a moment to leave the process table on a busy
	// machine, so each helper gets as long as the killed stub's did.
	for _, h := range helpers {
		waitFor(t, 5*time.Second, fmt.Sprintf("helper %d of the stopped server to end", h), func() bool { return !processAlive(h) })
	}
}

// With two instances and one of them busy for long, short requests must go
// to the other one: no request waits behind the slow execute.
func TestFaultNoRequestWaitsBehindSlowInstance(t *testing.T) {
	slow(t)
	ipctest.RequirePython(t)
	// Most of this test is the 10 s execute; it shares nothing with other
	// tests, so the readiness test's 6 s check runs beside it.
	t.Parallel()
	repo := t.TempDir()
	writeFP32Model(t, repo, "two_slow", "instance_group [{ kind: KIND_CPU count: 2 }]", faultSleepModel)
	s := startServer(t, repo)
	slow := make(chan timedInfer, 1)
	go func() { slow <- timedPost(s.HTTP, "two_slow", sleepRequest(10)) }()
	waitInFlight(t, s, "two_slow", 1, 10*time.Second, "the slow request to run")
	for round := range 3 {
		const clients = 4
		res := make(chan timedInfer, clients)
		for range clients {
			go func() { res <- timedPost(s.HTTP, "two_slow", sleepRequest(0.1)) }()
		}
		for range clients {
			r := <-res
			if r.err != nil || r.code != 200 {
				t.Fatalf("round %d: short request: %d %s %v", round, r.code, r.body, r.err)
			}
			// Four 0.1 s requests on one free instance take 0.4 s; 3 s
			// leaves room for a slow machine and none for the 10 s execute.
			if r.took > 3*time.Second {
				t.Errorf("round %d: a short request took %s: it waited behind the slow instance", round, r.took)
			}
		}
	}
	if r := <-slow; r.err != nil || r.code != 200 {
		t.Errorf("slow request: %d %s %v", r.code, r.body, r.err)
	}
}

// A request queued on a stub that is killed before it ran must not be told
// it died while executing: it never started.
func TestFaultQueuedRequestOnKilledStubDidNotRun(t *testing.T) {
	ipctest.RequirePython(t)
	repo := t.TempDir()
	writeFP32Model(t, repo, "one_hang", `parameters { key: "EXECUTE_TIMEOUT_MS" value { string_value: "1500" } }`, faultSleepModel)
	s := startServer(t, repo)
	hung := make(chan timedInfer, 1)
	go func() { hung <- timedPost(s.HTTP, "one_hang", sleepRequest(60)) }()
	waitInFlight(t, s, "one_hang", 1, 10*time.Second, "the hung request to run")
	queued := make(chan timedInfer, 2)
	for range 2 {
		go func() { queued <- timedPost(s.HTTP, "one_hang", sleepRequest(0)) }()
	}
	if r := <-hung; r.code != http.StatusServiceUnavailable || !strings.Contains(errorText(r.body), "died while executing") {
		t.Errorf("hung request: %d %s %v, want 503 'died while executing'", r.code, r.body, r.err)
	}
	for range 2 {
		r := <-queued
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.code == 200 {
			continue // re-queued and run by the restarted stub
		}
		if text := errorText(r.body); strings.Contains(text, "died while executing") || !strings.Contains(text, "did not run") {
			t.Errorf("queued request: %d %q, want success or a message saying it did not run", r.code, text)
		}
	}
}

// SIGTERM with an execute running longer than --exit-timeout-secs: the
// server exits within the timeout plus a second, the request is answered,
// and no stub is left (startServer's cleanup checks that).
func TestFaultShutdownBoundedByExitTimeout(t *testing.T) {
	slow(t)
	ipctest.RequirePython(t)
	repo := t.TempDir()
	writeFP32Model(t, repo, "long_exec", "", faultSleepModel)
	s := startServer(t, repo, "--exit-timeout-secs", "2")
	done := make(chan timedInfer, 1)
	go func() { done <- timedPost(s.HTTP, "long_exec", sleepRequest(20)) }()
	waitInFlight(t, s, "long_exec", 1, 10*time.Second, "the long request to run")
	start := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("shutdown took %s with --exit-timeout-secs=2, want at most 3s", took)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("server still running 30s after SIGTERM")
	}
	select {
	case r := <-done:
		if r.code == 200 {
			t.Errorf("the 20 s request succeeded after a 2 s shutdown: %s", r.body)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("the in-flight request got no answer after the server exited")
	}
}

// A model whose stub dies after it loaded and whose initialize then fails
// on every restart: the repository index, readiness and /v2/stubs all say
// UNAVAILABLE, each with the cause.
func TestFaultCrashLoopingModelOneState(t *testing.T) {
	ipctest.RequirePython(t)
	repo := t.TempDir()
	marker := filepath.Join(t.TempDir(), "started")
	modelPy := `
import os, threading, time

class TritonPythonModel:
    def initialize(self, args):
        if os.path.exists(` + strconv.Quote(marker) + `):
            raise RuntimeError("crash_loop refuses to start again")
        open(` + strconv.Quote(marker) + `, "w").close()
        threading.Thread(target=lambda: (time.sleep(0.3), os._exit(3)), daemon=True).start()

    def execute(self, requests):
        return []
`
	writeFP32Model(t, repo, "crash_loop", "", modelPy)
	s := startServer(t, repo, "--stub-restart-backoff", "50ms", "--stub-restart-backoff-max", "200ms")
	const cause = "crash_loop refuses to start again"
	type indexEntry struct {
		Name, Version, State, Reason string
	}
	sample := func() (indexEntry, int, modelStubs) {
		code, body := s.postJSON("/v2/repository/index", map[string]any{})
		if code != 200 {
			t.Fatalf("index: %d %s", code, body)
		}
		var idx []indexEntry
		if err := json.Unmarshal(body, &idx); err != nil || len(idx) != 1 {
			t.Fatalf("index: %v %s", err, body)
		}
		ready, _, _ := s.do("GET", "/v2/models/crash_loop/ready", nil)
		st := stubsOf(t, s, "crash_loop")
		if len(st) != 1 {
			t.Fatalf("stubs: %+v", st)
		}
		return idx[0], ready, st[0]
	}
	waitFor(t, 30*time.Second, "the model to crash and fail to restart", func() bool {
		_, _, st := sample()
		return len(st.Stubs) == 1 && strings.Contains(st.Stubs[0].LastCause, cause)
	})
	for range 5 {
		idx, ready, st := sample()
		if idx.State != "UNAVAILABLE" || !strings.Contains(idx.Reason, cause) {
			t.Errorf("index: %+v, want UNAVAILABLE naming %q", idx, cause)
		}
		if ready != http.StatusBadRequest {
			t.Errorf("model readiness: %d, want 400", ready)
		}
		if st.State != "UNAVAILABLE" || !strings.Contains(st.Reason, cause) {
			t.Errorf("/v2/stubs: state %q reason %q, want UNAVAILABLE naming %q", st.State, st.Reason, cause)
		}
		if code, _, _ := s.do("GET", "/v2/health/ready", nil); code != http.StatusBadRequest {
			t.Errorf("server readiness: %d, want 400 (strict readiness, a model unavailable)", code)
		}
	}
}
