package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Linux scheduling policies, as /proc/<pid>/stat reports them.
const (
	schedNormal = 0
	schedBatch  = 3
)

// schedPolicy reads the policy field of a thread's stat file.
func schedPolicy(t *testing.T, statPath string) int {
	t.Helper()
	b, err := os.ReadFile(statPath)
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name, which may hold spaces, start at
	// field 3; the policy is field 41.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	p, err := strconv.Atoi(fields[41-3])
	if err != nil {
		t.Fatalf("%s: policy %q: %v", statPath, fields[41-3], err)
	}
	return p
}

// The server's threads run under SCHED_BATCH so that they never preempt a
// stub when a reply wakes them; the stubs themselves keep the normal
// policy.
func TestSchedulingPolicies(t *testing.T) {
	// In place: the Go model is built from its sources inside the module.
	repo := modelsRepo(t)
	s := startServer(t, repo, "--model-control-mode", "explicit", "--load-model", "add_sub", "--load-model", "go_minimal")
	threads, err := filepath.Glob("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/task/*/stat")
	if err != nil || len(threads) == 0 {
		t.Fatalf("server threads: %v %v", threads, err)
	}
	batch := 0
	for _, th := range threads {
		if schedPolicy(t, th) == schedBatch {
			batch++
		}
	}
	// One thread, the one that forks stubs, is normal on purpose.
	if batch < len(threads)-1 {
		t.Errorf("%d of the server's %d threads run under SCHED_BATCH, want all but the launcher", batch, len(threads))
	}
	var all []modelStubs
	s.getJSON("/v2/stubs", &all)
	stubs := 0
	for _, m := range all {
		for _, st := range m.Stubs {
			stubs++
			if p := schedPolicy(t, "/proc/"+strconv.Itoa(st.PID)+"/stat"); p != schedNormal {
				t.Errorf("stub %s (pid %d) runs under policy %d, want SCHED_NORMAL", st.Instance, st.PID, p)
			}
		}
	}
	if stubs != 2 {
		t.Fatalf("%d stubs listed, want 2", stubs)
	}
}
