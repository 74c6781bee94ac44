package supervisor

import (
	"context"

	"github.com/stubvisor/stubvisor/backendapi"
)

// errClientShmDisabled is Triton's text when client shared memory is off.
var errClientShmDisabled = backendapi.Errorf(backendapi.Unsupported, "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.")

// inputBytes returns the bytes of a request input.
func (s *Supervisor) inputBytes(in *backendapi.InputTensor) ([]byte, error) {
	if in.SharedMemory != nil {
		return nil, backendapi.Errorf(backendapi.NotFound, "Unable to find shared memory region: '%s'", in.SharedMemory.Region)
	}
	return in.Data, nil
}

// RegisterSystemSharedMemory implements backendapi.Backend.
func (s *Supervisor) RegisterSystemSharedMemory(_ context.Context, name, key string, offset, byteSize uint64) error {
	if !s.opts.AllowClientShm {
		return errClientShmDisabled
	}
	return backendapi.Errorf(backendapi.Unsupported, "system shared memory is %v", errNotYet)
}

// UnregisterSystemSharedMemory implements backendapi.Backend.
func (s *Supervisor) UnregisterSystemSharedMemory(_ context.Context, name string) error {
	if !s.opts.AllowClientShm {
		return errClientShmDisabled
	}
	return nil
}

// SystemSharedMemoryStatus implements backendapi.Backend.
func (s *Supervisor) SystemSharedMemoryStatus(_ context.Context, name string) ([]backendapi.SystemSharedMemoryRegion, error) {
	if name != "" {
		return nil, backendapi.Errorf(backendapi.NotFound, "Unable to find system shared memory region: '%s'", name)
	}
	return []backendapi.SystemSharedMemoryRegion{}, nil
}

// RegisterCUDASharedMemory implements backendapi.Backend.
func (s *Supervisor) RegisterCUDASharedMemory(_ context.Context, name string, rawHandle []byte, deviceID int64, byteSize uint64) error {
	if !s.opts.AllowClientShm {
		return errClientShmDisabled
	}
	return backendapi.Errorf(backendapi.InvalidArg, "failed to register CUDA shared memory region: '%s', GPUs not supported", name)
}

// UnregisterCUDASharedMemory implements backendapi.Backend.
func (s *Supervisor) UnregisterCUDASharedMemory(_ context.Context, name string) error {
	if !s.opts.AllowClientShm {
		return errClientShmDisabled
	}
	return nil
}

// CUDASharedMemoryStatus implements backendapi.Backend.
func (s *Supervisor) CUDASharedMemoryStatus(_ context.Context, name string) ([]backendapi.CUDASharedMemoryRegion, error) {
	if name != "" {
		return nil, backendapi.Errorf(backendapi.NotFound, "Unable to find cuda shared memory region: '%s'", name)
	}
	return []backendapi.CUDASharedMemoryRegion{}, nil
}
