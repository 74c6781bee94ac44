package main

// The device check script (testdata/gpucheck/, make gpu-check) run here
// against the fake CUDA driver: every check that needs no torch passes, so
// what runs on a GPU machine is the same code, with the real driver
// beneath it.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
	"github.com/stubvisor/stubvisor/shmpool/shmtest"
	"github.com/stubvisor/stubvisor/supervisor/cuda/cudatest"
)

func TestGPUCheckScriptOnTheFakeDriver(t *testing.T) {
	slow(t)
	ipctest.RequirePython(t)
	fake := cudatest.BuildFake(t)
	shmBefore := shmEntries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	script, err := filepath.Abs(filepath.Join("..", "..", "testdata", "gpucheck", "gpu_check.py"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", script, "--bin", binPath, "--libcuda", fake,
		"--python", "/usr/bin/python3", "--budget", "200")
	// Its regions carry the client prefix, so the leak checks of packages
	// tested at the same time do not take them for their own.
	cmd.Env = append(os.Environ(), "GPUCHECK_SHM_PREFIX="+shmtest.ClientRegionPrefix+"gpucheck_")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gpu_check.py: %v\n%s", err, out)
	}
	want := map[string]string{
		"cuda-shm-roundtrip":               "PASS",
		"force-cpu-only-input-tensors-no":  "PASS",
		"torch-cuda-dlpack-output":         "SKIP", // no torch here
		"bls-gpu-tensors":                  "PASS",
		"two-kind-gpu-instances":           "PASS",
		"latency-64mib-cuda-vs-system-shm": "PASS",
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		verdict, rest, _ := strings.Cut(line, " ")
		name, _, _ := strings.Cut(rest, ":")
		got[name] = verdict
	}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("check %s: %q, want %s", name, got[name], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d lines, want one per check:\n%s", len(got), out)
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
	assertShmUnchanged(t, shmBefore)
}
