package server

import (
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestStatusPageInBrowser loads the status page in headless Chromium (when
// installed) and checks the DOM its script builds from /v2/stubs.
func TestStatusPageInBrowser(t *testing.T) {
	browser := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			browser = p
			break
		}
	}
	if browser == "" {
		t.Skip("no headless Chromium installed")
	}
	b := newTestBackend()
	b.stubs = sampleStubs()
	s, err := New(b, Options{Version: "1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.HTTPHandler())
	t.Cleanup(ts.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	reapDescendants(t)
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-breakpad", "--disable-crash-reporter", "--no-zygote",
		"--user-data-dir="+t.TempDir(), "--virtual-time-budget=3000", "--dump-dom", ts.URL+"/")
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", browser, err)
	}
	dom := string(out)
	for _, want := range []string{
		`data-instance="add_sub_0_0"`,
		`data-state="ready"`,
		`data-restarts="3"`,
		`data-pid="4242"`,
		`data-pool-capacity="67108864"`,
		`data-model="add_sub"`,
		`killed by signal 9`,
		`1.0 MiB / 64 MiB`,
		`triton protocol, version 1.2.3`,
		`id="status" data-ok="true"`,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered page lacks %s", want)
		}
	}
	if strings.Contains(dom, `data-refresh-count="0"`) {
		t.Errorf("the page never refreshed")
	}
	if t.Failed() {
		t.Logf("DOM:\n%s", dom)
	}
}

// reapDescendants makes the test process the subreaper of everything it
// starts, so that the helpers Chromium forks and orphans come back to it
// rather than to an init that may never reap them; at cleanup it waits for
// them (killing, by pid, any that outlive a bound) and reaps them all.
func reapDescendants(t *testing.T) {
	t.Helper()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skipf("cannot become a child subreaper: %v", err)
	}
	t.Cleanup(func() {
		defer func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) }()
		done := make(chan error, 1)
		go func() {
			for {
				var ws unix.WaitStatus
				_, err := unix.Wait4(-1, &ws, 0, nil)
				if errors.Is(err, unix.ECHILD) {
					done <- nil
					return
				}
				if err != nil && !errors.Is(err, unix.EINTR) {
					done <- err
					return
				}
			}
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("reaping browser helpers: %v", err)
			}
			return
		case <-time.After(10 * time.Second):
		}
		for _, pid := range childPIDs() {
			t.Logf("killing browser helper %d that outlived the browser", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("reaping browser helpers: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("browser helpers still running after SIGKILL: %v", childPIDs())
		}
	})
}

// childPIDs lists the live children of this process.
func childPIDs() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The fields after the parenthesised command: state, ppid, ...
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(self) {
			pids = append(pids, pid)
		}
	}
	return pids
}
