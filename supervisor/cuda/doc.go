// Package cuda binds the few CUDA driver API functions stubvisor needs for
// CUDA shared memory, without cgo: libcuda.so.1 is opened at run time with
// purego, so the binary builds and runs on machines that have no driver
// and fails only when a client actually registers a CUDA region.
//
// What it covers is what CUDA IPC needs: open a client's cudaIpcMemHandle_t
// in a device's primary context, learn the extent of the allocation behind
// it (to bound-check what clients register), copy between host and device,
// and close the handle. Allocation and handle export are bound too, because
// tests and benchmarks play the client's part.
//
// The CUDA context is a per-thread setting, and Go moves goroutines between
// threads: every call that needs a context locks the goroutine to its OS
// thread, makes the device's primary context current, calls, and unlocks.
//
// The library path is libcuda.so.1, or STUBVISOR_LIBCUDA when set (tests
// point it at a fake driver built from testdata/fakecuda.c).
package cuda

import (
	"errors"
	"fmt"
)

// EnvLibrary names the environment variable that overrides the driver
// library's path. The Python stub (python/stubvisor/cuda.py) reads it too.
const EnvLibrary = "STUBVISOR_LIBCUDA"

// DefaultLibrary is the driver's soname.
const DefaultLibrary = "libcuda.so.1"

// HandleSize is sizeof(cudaIpcMemHandle_t).
const HandleSize = 64

// Sentinels wrapped by the errors of this package.
var (
	// ErrNoDriver: the library cannot be loaded, lacks a symbol, or the
	// driver cannot initialise.
	ErrNoDriver = errors.New("no CUDA driver")
	// ErrNoDevice: the driver loaded but sees no device.
	ErrNoDevice = errors.New("no CUDA device")
	// ErrInvalidDevice: a device ordinal outside the devices present.
	ErrInvalidDevice = errors.New("invalid CUDA device")
	// ErrInvalidHandle: an IPC handle the driver cannot open.
	ErrInvalidHandle = errors.New("invalid CUDA IPC handle")
	// ErrInvalidValue: the driver refused an argument (a pointer or range
	// it does not know, for instance).
	ErrInvalidValue = errors.New("invalid value")
	// ErrOutOfRange: a copy or registration past the end of the memory.
	ErrOutOfRange = errors.New("range outside the CUDA allocation")
	// ErrClosed: the mapping or driver was closed.
	ErrClosed = errors.New("closed")
)

// Result is a CUresult.
type Result int32

// CUresult values this package tells apart (cuda.h).
const (
	Success            Result = 0
	ErrorInvalidValue  Result = 1
	ErrorOutOfMemory   Result = 2
	ErrorNotInit       Result = 3
	ErrorDeinit        Result = 4
	ErrorStubLibrary   Result = 34
	ErrorNoDriver      Result = 35 // CUDA_ERROR_INSUFFICIENT_DRIVER
	ErrorNoDevice      Result = 100
	ErrorInvalidDevice Result = 101
	ErrorInvalidCtx    Result = 201
	ErrorMapFailed     Result = 205
	ErrorInvalidHandle Result = 400
)

// Error is a failed driver call.
type Error struct {
	Op   string // the driver function
	Code Result
	Name string // cuGetErrorName's text, "" when it has none
}

func (e *Error) Error() string {
	if e.Name != "" {
		return fmt.Sprintf("%s: %s", e.Op, e.Name)
	}
	return fmt.Sprintf("%s: CUresult %d", e.Op, e.Code)
}

// Is maps the CUresult onto this package's sentinels, so callers test
// errors.Is(err, cuda.ErrNoDevice) and never compare codes.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNoDriver:
		return e.Code == ErrorNotInit || e.Code == ErrorDeinit || e.Code == ErrorStubLibrary || e.Code == ErrorNoDriver
	case ErrNoDevice:
		return e.Code == ErrorNoDevice
	case ErrInvalidDevice:
		return e.Code == ErrorInvalidDevice
	case ErrInvalidHandle:
		return e.Code == ErrorInvalidHandle || e.Code == ErrorMapFailed
	case ErrInvalidValue:
		return e.Code == ErrorInvalidValue
	}
	return false
}
