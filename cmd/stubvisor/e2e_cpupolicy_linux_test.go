package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// schedOf reads the scheduling policy and EEVDF slice (ns, 0 when the
// kernel shows none) of one thread from /proc/.../sched.
func schedOf(t *testing.T, path string) (policy, slice int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	field := func(name string) int {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s*:\s*(\d+)`).FindSubmatch(b)
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(string(m[1]))
		return n
	}
	return field("policy"), field("se.slice")
}

// customSlices reports whether this kernel gives a SCHED_NORMAL thread the
// slice it asks for in sched_runtime (Linux 6.12 on), trying it on a
// thread of the test's own.
func customSlices(t *testing.T) bool {
	done := make(chan bool)
	go func() {
		runtime.LockOSThread() // the thread ends with this goroutine, slice and all
		attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL, Runtime: 250000}
		if unix.SchedSetAttr(0, &attr, 0) != nil {
			done <- false
			return
		}
		_, slice := schedOf(t, fmt.Sprintf("/proc/self/task/%d/sched", unix.Gettid()))
		done <- slice == 250000
	}()
	return <-done
}

// TestCPUPolicy checks both --cpu-policy values on the server's threads
// and on the stubs it started, Python and Go: latency puts all of them
// under the normal policy with the 100 µs slice, batch puts the server
// under SCHED_BATCH and leaves the stubs normal with the kernel's own
// slice. The launcher's thread, which forks the stubs, runs under their
// policy.
func TestCPUPolicy(t *testing.T) {
	slices := customSlices(t)
	// In place: the Go model is built from its sources inside the module.
	repo := modelsRepo(t)
	cases := []struct {
		args         []string
		serverPolicy int
		slice        int // 0: the kernel's own
	}{
		{nil, unix.SCHED_BATCH, 0},
		{[]string{"--cpu-policy=latency"}, unix.SCHED_NORMAL, 100000},
		{[]string{"--cpu-policy=batch"}, unix.SCHED_BATCH, 0},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.args), func(t *testing.T) {
			s := startServer(t, repo, append([]string{"--model-control-mode", "explicit", "--load-model", "add_sub", "--load-model", "go_minimal"}, c.args...)...)
			checkSlice := func(what string, slice int) {
				switch {
				case !slices:
				case c.slice != 0 && slice != c.slice:
					t.Errorf("%s: slice %d ns, want %d", what, slice, c.slice)
				case c.slice == 0 && slice == 100000:
					t.Errorf("%s: slice %d ns, want the kernel's own", what, slice)
				}
			}
			threads, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/sched", s.cmd.Process.Pid))
			if err != nil || len(threads) < 2 {
				t.Fatalf("server threads %v: %v", threads, err)
			}
			others := 0
			for _, th := range threads {
				policy, slice := schedOf(t, th)
				if policy != c.serverPolicy {
					others++
					continue
				}
				checkSlice(th, slice)
			}
			if others > 1 {
				t.Errorf("%d of %d server threads are not under policy %d, want all but the launcher's", others, len(threads), c.serverPolicy)
			}
			for _, model := range []string{"add_sub", "go_minimal"} {
				stub := oneStub(t, s, model)
				policy, slice := schedOf(t, fmt.Sprintf("/proc/%d/sched", stub.PID))
				if policy != unix.SCHED_NORMAL {
					t.Errorf("%s stub: policy %d, want the normal policy", model, policy)
				}
				checkSlice(model+" stub", slice)
			}
		})
	}
}

// TestCPUPolicyFlag: an unknown policy ends the server with exit status 2
// and says what it takes.
func TestCPUPolicyFlag(t *testing.T) {
	out, err := exec.Command(binPath, "--model-repository", t.TempDir(), "--cpu-policy=fast").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), `"fast": want latency or batch`) {
		t.Errorf("got %v:\n%s\nwant exit 2 naming the two policies", err, out)
	}
}
