package memlimit

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func write(t *testing.T, path, text string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestOwnCgroupDir(t *testing.T) {
	const (
		hybrid = "30 25 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n" +
			"35 30 0:30 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n" +
			"40 30 0:35 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
		unified = "22 1 0:21 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
		v1only  = "35 30 0:30 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
	)
	for _, tc := range []struct {
		name, mountinfo, cgroup, want, wantErr string
	}{
		{"unified hierarchy", unified, "0::/system.slice/stubvisor.service\n", "/sys/fs/cgroup/system.slice/stubvisor.service", ""},
		{"hybrid host", hybrid, "4:memory:/x\n0::/\n", "/sys/fs/cgroup/unified", ""},
		{"v1 only", v1only, "4:memory:/x\n", "", "no cgroup v2"},
		{"no cgroup2 mount", v1only, "0::/\n", "", "no cgroup2 file system"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			got, err := ownCgroupDir(write(t, dir+"/mountinfo", tc.mountinfo), write(t, dir+"/cgroup", tc.cgroup))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ownCgroupDir = %q, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ownCgroupDir = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestDelegate runs delegate on directories laid out like cgroups (a
// plain directory accepts every write, so only the decisions are tested
// here; TestCgroupKill uses the kernel's).
func TestDelegate(t *testing.T) {
	for _, tc := range []struct {
		name, controllers, subtree string
		wantErr                    string
	}{
		{"memory delegated already", "cpu io memory pids", "memory pids", ""},
		{"memory available, enabled here", "cpu memory", "", ""},
		{"no memory controller", "cpu io pids", "", "memory controller is not available"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir+"/cgroup.controllers", tc.controllers)
			write(t, dir+"/cgroup.subtree_control", tc.subtree)
			got, err := delegate(dir)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("delegate = %q, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != dir {
				t.Fatalf("delegate = %q, %v; want %q", got, err, dir)
			}
			if b, _ := os.ReadFile(dir + "/cgroup.subtree_control"); !hasWord(b, "memory") && !hasWord(b, "+memory") {
				t.Errorf("subtree_control is %q: memory not enabled", b)
			}
		})
	}
}

func TestOOMKills(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		events string
		want   uint64
	}{
		{"low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n", 1},
		{"low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n", 0},
		{"", 0},
	} {
		if got := oomKills(write(t, dir+"/memory.events", tc.events)); got != tc.want {
			t.Errorf("oomKills(%q) = %d, want %d", tc.events, got, tc.want)
		}
	}
	if got := oomKills(dir + "/absent"); got != 0 {
		t.Errorf("oomKills of a missing file = %d", got)
	}
}

// hog is a Python process that, once it reads a line (the limit is in
// place by then, as a stub's model loads only on initialize), allocates
// 1 MiB at a time up to 2 GiB, exiting with ExitOverLimit on MemoryError
// as the Python stub does, and with 0 if nothing stopped it.
const hog = `import os, sys
sys.stdin.readline()
held = []
try:
    for _ in range(2048):
        held.append(b"\x01" * (1 << 20))
except MemoryError:
    os._exit(86)
`

func startHog(t *testing.T, lim *Limit) *exec.Cmd {
	t.Helper()
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skip("needs /usr/bin/python3")
	}
	cmd := exec.Command(py, "-c", hog)
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	lim.SysProcAttr(cmd.SysProcAttr)
	cmd.Env = append(os.Environ(), lim.Env()...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := lim.Started(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	return cmd
}

func waitStatus(t *testing.T, cmd *exec.Cmd) syscall.WaitStatus {
	t.Helper()
	err := cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.Sys().(syscall.WaitStatus)
}

func TestRlimitStopsAnAllocation(t *testing.T) {
	for _, m := range []Method{RlimitData, RlimitAS} {
		t.Run(string(m), func(t *testing.T) {
			l, err := New(m)
			if err != nil || l.Method() != m {
				t.Fatalf("New(%s) = %v, %v", m, l, err)
			}
			lim, err := l.Prepare("hog", 400<<20)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(lim.Close)
			if env := lim.Env(); len(env) != 1 || env[0] != EnvRlimit+"=419430400" {
				t.Errorf("Env = %q", env)
			}
			ws := waitStatus(t, startHog(t, lim))
			if !lim.OverLimit(ws) {
				t.Fatalf("the hog exited with %v under a 400 MiB %s: not over its limit", ws, m)
			}
			if lim.OverLimit(syscall.WaitStatus(9)) { // SIGKILL
				t.Error("a plain SIGKILL reads as over the limit")
			}
		})
	}
}

// TestNewOnThisHost checks the choice New makes here and, where cgroup v2
// is available, that the kernel kills a stub over its limit and the kill
// is told apart from a plain SIGKILL.
func TestNewOnThisHost(t *testing.T) {
	l, err := New("")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("method %s: %s", l.Method(), l.Reason())
	if l.Method() != CgroupV2 {
		if l.Method() != RlimitData || l.Reason() == "" {
			t.Fatalf("fallback %s with reason %q", l.Method(), l.Reason())
		}
		if _, err := New(CgroupV2); err == nil {
			t.Fatal("New(CgroupV2) succeeds where New chose an rlimit")
		}
		t.Skip("no cgroup v2 memory controller here: the kernel-kill path is not run")
	}
	lim, err := l.Prepare("hog", 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lim.Close)
	ws := waitStatus(t, startHog(t, lim))
	if !ws.Signaled() || !lim.OverLimit(ws) {
		t.Fatalf("the hog exited with %v under a 64 MiB cgroup: not killed for memory", ws)
	}
}
