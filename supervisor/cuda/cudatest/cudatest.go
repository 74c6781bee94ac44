// Package cudatest gives tests a CUDA driver to run against: the fake
// driver built from supervisor/cuda/testdata/fakecuda.c (host memory behind
// the CUDA driver API, so the CUDA shared-memory path runs without a GPU),
// or the real one when the machine has a GPU.
package cudatest

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stubvisor/stubvisor/supervisor/cuda"
)

// Driver is one driver a test body runs against.
type Driver struct {
	Name string // "fake" or "real"
	Path string // the library, for cuda.EnvLibrary
}

// source is the fake driver's C file.
func source() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata", "fakecuda.c")
}

// BuildFake compiles the fake driver into a temporary directory and
// returns its path. It skips the test when gcc is missing.
func BuildFake(t testing.TB) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found: the fake CUDA driver cannot be built")
	}
	out := filepath.Join(t.TempDir(), "libfakecuda.so")
	if b, err := exec.Command(gcc, "-shared", "-fPIC", "-O1", "-Wall", "-o", out, source()).CombinedOutput(); err != nil {
		t.Fatalf("build fake CUDA driver: %v\n%s", err, b)
	}
	return out
}

// Drivers returns the fake driver and, when a real libcuda.so.1 loads and
// sees a device, the real one: the same test body runs against each.
func Drivers(t testing.TB) []Driver {
	t.Helper()
	ds := []Driver{{Name: "fake", Path: BuildFake(t)}}
	if HaveGPU() {
		ds = append(ds, Driver{Name: "real", Path: cuda.DefaultLibrary})
	}
	return ds
}

// HaveGPU reports whether the real driver loads and sees a device.
func HaveGPU() bool {
	_, err := cuda.LoadLibrary(cuda.DefaultLibrary)
	return err == nil
}
