package main

// The stub benchmark: one execute round trip through the supervisor
// (dispatch, ring, stub, model, ring, receive) without any front end, for
// the Python stub and for a Go stub, plus the same Python model called
// in-process as the yardstick: the difference is what the stub machinery
// costs.

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/supervisor"
)

func init() {
	register("stub", "execute round trips through the supervisor to a Python and a Go stub (identity, 16 x FP32)", runStubBench)
}

// stubElems is the tensor size of every case: 16 FP32 values.
const stubElems = 16

func runStubBench(args []string) error {
	fs := flag.NewFlagSet("stub", flag.ContinueOnError)
	iters := fs.Int("n", 20000, "round trips per case")
	warm := fs.Int("warmup", 2000, "round trips before measuring")
	python := fs.String("python", "/usr/bin/python3", "Python interpreter with numpy and msgpack")
	spin := fs.Duration("spin", 0, "ring spin before sleeping (0: the ipc default)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	cache, err := os.MkdirTemp("", "stubvisor-bench-stub-")
	if err != nil {
		return fmt.Errorf("stub bench: %w", err)
	}
	defer os.RemoveAll(cache)

	opts := supervisor.DefaultOptions()
	// The repository is used in place: the Go model is built from its
	// sources inside the module.
	opts.Repositories = []string{filepath.Join(root, "testdata", "models")}
	opts.ModelControl = supervisor.ControlExplicit
	opts.StartupModels = []string{"identity_fp32", "go_identity_fp32"}
	opts.Python = *python
	opts.CacheDir = cache
	opts.Logger = hclog.NewNullLogger()
	if *spin > 0 {
		opts.IPC.Spin = *spin
	}
	sup, err := supervisor.New(opts)
	if err != nil {
		return fmt.Errorf("stub bench: start supervisor: %w", err)
	}
	defer sup.Close(10 * time.Second)

	for _, c := range []struct{ name, model string }{
		{"execute-roundtrip-16xFP32", "identity_fp32"},
		{"go-execute-roundtrip-16xFP32", "go_identity_fp32"},
	} {
		st, err := roundTrips(sup, c.model, *warm, *iters)
		if err != nil {
			return fmt.Errorf("stub bench %s: %w", c.name, err)
		}
		printStubCase(c.name, st)
	}
	st, err := pythonInProcess(root, *python, *warm, *iters)
	if err != nil {
		return fmt.Errorf("stub bench python-inprocess: %w", err)
	}
	printStubCase("python-inprocess-16xFP32", st)
	return nil
}

// roundTrips times Infer calls on model, one at a time, checking each
// answer.
func roundTrips(sup *supervisor.Supervisor, model string, warm, n int) (Stats, error) {
	data := make([]byte, 4*stubElems)
	for i := range stubElems {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32(i)+0.5))
	}
	req := &backendapi.InferRequest{ModelName: model,
		Inputs: []backendapi.InputTensor{{Name: "INPUT0", DataType: backendapi.TypeFP32, Shape: []int64{stubElems}, Data: data}}}
	ctx := context.Background()
	one := func() error {
		resp, err := sup.Infer(ctx, req)
		if err != nil {
			return err
		}
		defer resp.Release()
		if len(resp.Outputs) != 1 || string(resp.Outputs[0].Data) != string(data) {
			return fmt.Errorf("wrong output %+v", resp.Outputs)
		}
		return nil
	}
	for range warm {
		if err := one(); err != nil {
			return Stats{}, err
		}
	}
	samples := make([]time.Duration, n)
	start := time.Now()
	for i := range n {
		t0 := time.Now()
		if err := one(); err != nil {
			return Stats{}, err
		}
		samples[i] = time.Since(t0)
	}
	return summarize(samples, n, time.Since(start)), nil
}

// inProcessScript times identity_fp32's execute called directly, with
// the pb_utils objects a stub would hand it. It prints "p50_ns p99_ns
// per_s".
const inProcessScript = `
import importlib.util, sys, time, types
import numpy as np
import triton_python_backend_utils as pb

model_file, warm, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
spec = importlib.util.spec_from_file_location("model", model_file)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
model = module.TritonPythonModel()
rt = types.SimpleNamespace(model_name="identity_fp32", model_version=1)
data = np.arange(16, dtype=np.float32) + 0.5

def request():
    return pb._incoming_request(rt, 1, "", 0, 0, [pb.Tensor("INPUT0", data)], [], "{}", 0)

for _ in range(warm):
    model.execute([request()])
samples = []
clock = time.perf_counter_ns
start = clock()
for _ in range(n):
    t0 = clock()
    out = model.execute([request()])
    samples.append(clock() - t0)
elapsed = clock() - start
assert np.array_equal(out[0].output_tensors()[0].as_numpy(), data)
samples.sort()
print(samples[len(samples) // 2], samples[min(len(samples) - 1, len(samples) * 99 // 100)], n / (elapsed / 1e9))
`

// pythonInProcess runs inProcessScript on identity_fp32's model.py.
func pythonInProcess(root, python string, warm, n int) (Stats, error) {
	cmd := exec.Command(python, "-c", inProcessScript,
		filepath.Join(root, "testdata", "models", "identity_fp32", "1", "model.py"), fmt.Sprint(warm), fmt.Sprint(n))
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "python"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return Stats{}, err
	}
	var p50, p99, perS float64
	if _, err := fmt.Sscan(strings.TrimSpace(string(out)), &p50, &p99, &perS); err != nil {
		return Stats{}, fmt.Errorf("parse %q: %w", out, err)
	}
	return Stats{P50: time.Duration(p50), P99: time.Duration(p99), PerSecond: perS}, nil
}

func printStubCase(name string, s Stats) {
	fmt.Printf("stub %s p50_us=%.2f p99_us=%.2f per_s=%.0f\n", name,
		float64(s.P50)/float64(time.Microsecond), float64(s.P99)/float64(time.Microsecond), s.PerSecond)
}
