// Package ipctest holds the helpers the tests of several packages share
// (ipc, stub, python, supervisor, server, cmd/stubvisor): the interpreter
// the Python stub runs under, a buffer a child process may write while a
// test reads it, and little-endian tensor bytes. It is imported only by
// tests.
package ipctest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os/exec"
	"sync"
	"testing"
)

// PythonPath is the interpreter the Python stub runs under in tests:
// Debian's, with python3-numpy and python3-msgpack (the python3 first on
// PATH may be another).
const PythonPath = "/usr/bin/python3"

var pythonOnce = sync.OnceValue(func() error {
	out, err := exec.Command(PythonPath, "-c", "import numpy, msgpack").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s cannot import numpy and msgpack (install python3-numpy python3-msgpack): %v: %s", PythonPath, err, out)
	}
	return nil
})

// RequirePython skips the test when PythonPath cannot import numpy and
// msgpack.
func RequirePython(t testing.TB) {
	t.Helper()
	if err := pythonOnce(); err != nil {
		t.Skip(err)
	}
}

// LockedBuffer is a bytes.Buffer safe for one writer (a child's stderr,
// say) and readers in other goroutines.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// FP32 returns the little-endian bytes of an FP32 tensor.
func FP32(v ...float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// FP32s reads the little-endian bytes of an FP32 tensor.
func FP32s(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// INT32 returns the little-endian bytes of an INT32 tensor.
func INT32(v ...int32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, uint32(x))
	}
	return b
}

// INT32s reads the little-endian bytes of an INT32 tensor.
func INT32s(b []byte) []int32 {
	v := make([]int32, len(b)/4)
	for i := range v {
		v[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// BYTES returns a BYTES tensor's bytes as Triton lays them out: each
// element's length (4 bytes, little-endian), then the element.
func BYTES(elems ...string) []byte {
	var b []byte
	for _, e := range elems {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(e)))
		b = append(b, e...)
	}
	return b
}
