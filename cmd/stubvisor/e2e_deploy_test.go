package main

import (
	"net/http"
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
