package supervisor

import (
	"context"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/supervisor/clientshm"
)

// The client shared-memory endpoints of backendapi.Backend; the registry
// is package clientshm. Status works with client shared memory disabled,
// as in Triton.

// RegisterSystemSharedMemory implements backendapi.Backend.
func (s *Supervisor) RegisterSystemSharedMemory(_ context.Context, name, key string, offset, byteSize uint64) error {
	if !s.opts.AllowClientShm {
		return clientshm.Disabled()
	}
	return s.shm.RegisterSystem(name, key, offset, byteSize)
}

// UnregisterSystemSharedMemory implements backendapi.Backend ("" means
// all). A region still in use by a request is released when it ends.
func (s *Supervisor) UnregisterSystemSharedMemory(_ context.Context, name string) error {
	if !s.opts.AllowClientShm {
		return clientshm.Disabled()
	}
	s.shm.Unregister(name, false)
	return nil
}

// SystemSharedMemoryStatus implements backendapi.Backend.
func (s *Supervisor) SystemSharedMemoryStatus(_ context.Context, name string) ([]backendapi.SystemSharedMemoryRegion, error) {
	return s.shm.SystemStatus(name)
}

// RegisterCUDASharedMemory implements backendapi.Backend.
func (s *Supervisor) RegisterCUDASharedMemory(_ context.Context, name string, rawHandle []byte, deviceID int64, byteSize uint64) error {
	if !s.opts.AllowClientShm {
		return clientshm.Disabled()
	}
	return s.shm.RegisterCUDA(name, rawHandle, deviceID, byteSize)
}

// UnregisterCUDASharedMemory implements backendapi.Backend.
func (s *Supervisor) UnregisterCUDASharedMemory(_ context.Context, name string) error {
	if !s.opts.AllowClientShm {
		return clientshm.Disabled()
	}
	s.shm.Unregister(name, true)
	return nil
}

// CUDASharedMemoryStatus implements backendapi.Backend.
func (s *Supervisor) CUDASharedMemoryStatus(_ context.Context, name string) ([]backendapi.CUDASharedMemoryRegion, error) {
	return s.shm.CUDAStatus(name)
}
