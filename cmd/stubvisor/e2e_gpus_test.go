package main

// KIND_GPU instances on the fake CUDA driver's devices: without gpus a
// group runs count instances on every device the driver reports, each
// told its device (model_instance_device_id), and with
// CUDA_VISIBLE_DEVICES_PER_INSTANCE each stub sees only its own.

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
	"github.com/stubvisor/stubvisor/supervisor/cuda"
	"github.com/stubvisor/stubvisor/supervisor/cuda/cudatest"
)

const deviceReportPy = `import os

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        pb_utils.Logger.log_info("instance %s device %s visible %s ." % (
            args["model_instance_name"], args["model_instance_device_id"], os.environ.get("CUDA_VISIBLE_DEVICES", "-")))

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.get_input_tensor_by_name(r, "INPUT0")]) for r in requests]
`

func TestGPUInstancesSpreadOverDevices(t *testing.T) {
	ipctest.RequirePython(t)
	fake := cudatest.BuildFake(t)
	t.Setenv(cuda.EnvLibrary, fake)
	t.Setenv("FAKECUDA_DEVICES", "2")
	for _, tc := range []struct {
		name, param string
		visible     bool
	}{
		{"devices told", "", false},
		{"CUDA_VISIBLE_DEVICES per instance", `parameters { key: "CUDA_VISIBLE_DEVICES_PER_INSTANCE" value { string_value: "yes" } }`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			repo := t.TempDir()
			writeFP32Model(t, repo, "gpu_spread", "instance_group [{ count: 2 kind: KIND_GPU }]\n"+tc.param, deviceReportPy)
			s := startServer(t, repo)
			stubs := allStubs(t, s, "gpu_spread")
			if len(stubs) != 4 {
				t.Fatalf("%d stubs, want 2 on each of the 2 devices: %+v", len(stubs), stubs)
			}
			perDevice := map[string]int{}
			for _, st := range stubs {
				var line string
				waitFor(t, 10*time.Second, "the stub's initialize log line", func() bool {
					for _, l := range strings.Split(s.Log(), "\n") {
						if strings.Contains(l, "instance "+st.Instance+" device ") {
							line = l
							return true
						}
					}
					return false
				})
				var dev, visible string
				rest := line[strings.Index(line, "instance "+st.Instance):]
				if _, err := fmt.Sscanf(rest, "instance "+st.Instance+" device %s visible %s .", &dev, &visible); err != nil {
					t.Fatalf("log line %q: %v", line, err)
				}
				perDevice[dev]++
				want := "-"
				if tc.visible {
					want = dev
				}
				if visible != want {
					t.Errorf("%s on device %s sees CUDA_VISIBLE_DEVICES=%s, want %s", st.Instance, dev, visible, want)
				}
				env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", st.PID))
				if got := strings.Contains(string(env), "\x00CUDA_VISIBLE_DEVICES="+dev+"\x00"); got != tc.visible {
					t.Errorf("%s's environment has CUDA_VISIBLE_DEVICES=%s: %v, want %v", st.Instance, dev, got, tc.visible)
				}
			}
			if perDevice["0"] != 2 || perDevice["1"] != 2 {
				t.Errorf("instances per device %v, want 2 on each", perDevice)
			}
		})
	}
}
