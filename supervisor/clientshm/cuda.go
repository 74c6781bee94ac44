package clientshm

import (
	"errors"
	"fmt"
	"sync"

	"github.com/stubvisor/stubvisor/backendapi"

	"github.com/stubvisor/stubvisor/supervisor/cuda"
)

// CUDA shared memory. The supervisor opens each registered handle once,
// through the CUDA driver bound at run time (package cuda), to check that
// the client's byte_size fits the allocation behind it, and keeps it open
// until the region is unregistered and no request uses it, so the memory
// cannot be freed under a request. The bytes never pass through the
// supervisor: a stub opens the same handle itself (the handle and device
// travel in MapRegion) and reads inputs or writes outputs on the device.

// errNoGPU is the reason CUDA regions are refused without a usable driver
// or device.
var errNoGPU = errors.New("GPUs not supported")

// errCUDAHandleSize is the reason for a raw handle that is not a
// cudaIpcMemHandle_t.
var errCUDAHandleSize = fmt.Errorf("raw handle is not %d bytes", cuda.HandleSize)

var (
	cudaOnce   sync.Once
	cudaDrv    *cuda.Driver
	cudaDrvErr error
)

// CUDADriver loads the driver on first use; the process keeps it.
func CUDADriver() (*cuda.Driver, error) {
	cudaOnce.Do(func() { cudaDrv, cudaDrvErr = cuda.Load() })
	return cudaDrv, cudaDrvErr
}

// cudaRegion is an opened CUDA IPC handle.
type cudaRegion struct {
	m      *cuda.Mapping
	handle []byte
	device int64
}

// openCUDARegion opens rawHandle on device deviceID and checks that
// byteSize fits the allocation (cuMemGetAddressRange).
func openCUDARegion(rawHandle []byte, deviceID int64, byteSize uint64) (*cudaRegion, error) {
	// A handle of the wrong size is refused before the driver is looked
	// for: it is invalid with or without a GPU.
	if len(rawHandle) != cuda.HandleSize {
		return nil, errCUDAHandleSize
	}
	d, err := CUDADriver()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNoGPU, err)
	}
	if deviceID < 0 || deviceID >= int64(d.DeviceCount()) {
		return nil, fmt.Errorf("invalid device id %d (%d CUDA devices): %w", deviceID, d.DeviceCount(), cuda.ErrInvalidDevice)
	}
	m, err := d.OpenIPCHandle(int(deviceID), rawHandle)
	if err != nil {
		return nil, err
	}
	if byteSize > m.Size {
		_ = m.Close()
		return nil, fmt.Errorf("byte_size %d is larger than the CUDA allocation (%d bytes): %w", byteSize, m.Size, cuda.ErrOutOfRange)
	}
	return &cudaRegion{m: m, handle: append([]byte(nil), rawHandle...), device: deviceID}, nil
}

func (c *cudaRegion) close() {
	if c != nil && c.m != nil {
		_ = c.m.Close()
	}
}

// cudaRegisterError is Triton's answer to a refused CUDA registration.
// Triton tells the client only "invalid args" and logs the cause: a handle
// the driver cannot open (garbage, the wrong size over gRPC, a device that
// does not exist) names no region, a byte_size past the allocation names
// it. Without a driver or device the answer is that of a Triton built
// without GPU support.
func cudaRegisterError(name string, err error) error {
	switch {
	case errors.Is(err, errNoGPU):
		return backendapi.Errorf(backendapi.InvalidArg, "failed to register CUDA shared memory region: '%s', GPUs not supported", name)
	case errors.Is(err, cuda.ErrOutOfRange):
		return backendapi.Errorf(backendapi.InvalidArg, "failed to register shared memory region '%s': invalid args", name)
	}
	return backendapi.Errorf(backendapi.InvalidArg, "failed to register shared memory region: invalid args")
}
