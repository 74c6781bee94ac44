package main

import (
	"bytes"
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

// TestDeployLaunchArgs: the argument lists of ModelMesh's Triton runtime
// and of Triton's Helm chart start the server unchanged (KServe's list is
// run against the image, deploy/e2e).
func TestDeployLaunchArgs(t *testing.T) {
	ipctest.RequirePython(t)
	for _, tc := range []struct {
		name      string
		args      []string
		wantModel bool
	}{
		{"ModelMesh", []string{"--model-control-mode=explicit", "--strict-model-config=false",
			"--strict-readiness=false", "--allow-http=true", "--allow-sagemaker=false"}, false},
		{"Triton's Helm chart", []string{"--log-verbose=1", "--model-control-mode=poll", "--repository-poll-secs=5",
			"--strict-readiness=true", "--exit-timeout-secs=30", "--drain-delay-secs=0"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServer(t, copyRepo(t, "add_sub"), tc.args...)
			if code, _, _ := s.do("GET", "/v2/health/ready", nil); code != http.StatusOK {
				t.Errorf("not ready: %d", code)
			}
			code, _, _ := s.do("GET", "/v2/models/add_sub/ready", nil)
			if (code == http.StatusOK) != tc.wantModel {
				t.Errorf("add_sub ready: %d, want loaded %v", code, tc.wantModel)
			}
		})
	}
}

// TestDrainDelay: after SIGTERM the server reports not ready at once but
// still serves for --drain-delay-secs, then exits.
func TestDrainDelay(t *testing.T) {
	slow(t)
	ipctest.RequirePython(t)
	s := startServer(t, copyRepo(t, "add_sub"), "--drain-delay-secs=2", "--exit-timeout-secs=10")
	body := []byte(`{"inputs":[{"name":"INPUT0","shape":[4],"datatype":"FP32","data":[1,2,3,4]},` +
		`{"name":"INPUT1","shape":[4],"datatype":"FP32","data":[1,1,1,1]}]}`)
	sigterm := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Second, "readiness to turn false", func() bool {
		code, _, _ := s.do("GET", "/v2/health/ready", nil)
		return code == http.StatusBadRequest
	})
	if code, _, _ := s.do("GET", "/v2/health/live", nil); code != http.StatusOK {
		t.Errorf("not live during the drain delay: %d", code)
	}
	if code, _, b := s.do("POST", "/v2/models/add_sub/infer", body); code != http.StatusOK {
		t.Errorf("infer during the drain delay: %d %s", code, b)
	}
	select {
	case <-s.exited:
	case <-time.After(15 * time.Second):
		t.Fatal("the server did not exit within 15s of SIGTERM")
	}
	if d := time.Since(sigterm); d < 2*time.Second {
		t.Errorf("exited %v after SIGTERM, before the 2 s drain delay", d)
	}
}

// orphanModel starts a helper in a session of its own, which the stub's
// process group kill does not reach. Once the stub is gone the helper
// writes the pid of its new parent to helper.ppid in the model directory,
// and it exits when that parent is gone too (or when it is killed).
const orphanModel = `import os, subprocess, sys
import triton_python_backend_utils as pb_utils

HELPER = """
import os, sys, time
stub, out = int(sys.argv[1]), sys.argv[2]
while os.getppid() == stub:
    time.sleep(0.02)
with open(out + ".tmp", "w") as f:
    f.write(str(os.getppid()))
os.rename(out + ".tmp", out)
adopter = os.getppid()
while os.getppid() == adopter:
    time.sleep(0.02)
"""


class TritonPythonModel:
    def initialize(self, args):
        out = os.path.join(args["model_repository"], "helper.ppid")
        subprocess.Popen([sys.executable, "-c", HELPER, str(os.getpid()), out], start_new_session=True)

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]) for r in requests]
`

// procState returns the state and parent of a process, ok false when it
// is gone.
func procState(pid int) (state string, ppid int, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", 0, false
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	ppid, _ = strconv.Atoi(f[1])
	return f[0], ppid, true
}

// TestInitReapsOrphans: with STUBVISOR_INIT=1 the process is a child
// subreaper in front of the server (as PID 1 is in a container): a
// model's helper that outlives its stub is re-parented to it, and reaped
// when it dies.
func TestInitReapsOrphans(t *testing.T) {
	ipctest.RequirePython(t)
	repo := t.TempDir()
	dir := filepath.Join(repo, "orphan", "1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := "backend: \"python\"\ninput [{ name: \"INPUT0\" data_type: TYPE_FP32 dims: [ 1 ] }]\n" +
		"output [{ name: \"OUTPUT0\" data_type: TYPE_FP32 dims: [ 1 ] }]\n"
	if err := os.WriteFile(filepath.Join(repo, "orphan", "config.pbtxt"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model.py"), []byte(orphanModel), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("STUBVISOR_INIT", "1")
	s := startServer(t, repo)
	initPid := s.cmd.Process.Pid
	var all []struct {
		Stubs []struct {
			PID int `json:"pid"`
		} `json:"stubs"`
	}
	s.getJSON("/v2/models/orphan/stubs", &all)
	if len(all) != 1 || len(all[0].Stubs) != 1 {
		t.Fatalf("stubs %+v", all)
	}
	stub := all[0].Stubs[0].PID
	if _, ppid, _ := procState(stub); ppid == initPid {
		t.Fatalf("stub %d is a child of the init, not of the server", stub)
	}
	var helper int
	for _, p := range childrenOf(stub) {
		helper = p
	}
	if helper == 0 {
		t.Fatalf("the stub %d started no helper", stub)
	}
	t.Cleanup(func() { _ = syscall.Kill(helper, syscall.SIGKILL) })
	if err := syscall.Kill(stub, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ppidFile := filepath.Join(repo, "orphan", "helper.ppid")
	waitFor(t, 30*time.Second, "the helper to be re-parented", func() bool {
		_, err := os.Stat(ppidFile)
		return err == nil
	})
	if b, _ := os.ReadFile(ppidFile); string(b) != strconv.Itoa(initPid) {
		t.Fatalf("the orphaned helper's parent is %s, want the init %d", b, initPid)
	}
	if err := syscall.Kill(helper, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, fmt.Sprintf("the helper %d to be reaped", helper), func() bool {
		_, _, alive := procState(helper)
		return !alive
	})
}
