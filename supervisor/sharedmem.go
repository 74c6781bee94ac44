package supervisor

import (
	"context"
	"sort"

	"github.com/stubvisor/stubvisor/backendapi"
)

// errClientShmDisabled is Triton's text when client shared memory is off.
var errClientShmDisabled = backendapi.Errorf(backendapi.Unsupported, "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.")

// RegisterSystemSharedMemory implements backendapi.Backend. The supervisor
// keeps the object's fd (the client may unlink the name) and maps nothing.
func (s *Supervisor) RegisterSystemSharedMemory(_ context.Context, name, key string, offset, byteSize uint64) error {
	if !s.opts.AllowClientShm {
		return errClientShmDisabled
	}
	fd, size, err := openShmKey(key)
	if err != nil {
		s.log.Debug("register system shared memory", "name", name, "key", key, "error", err)
		return backendapi.Errorf(backendapi.Internal, "Unable to open shared memory region: '%s'", key)
	}
	if offset > size || byteSize > size-offset {
		_ = fd.Close()
		return backendapi.Errorf(backendapi.InvalidArg, "failed to register shared memory region '%s': invalid args", name)
	}
	r := &shmRegion{name: name, key: key, offset: offset, size: byteSize, deviceID: -1, fd: fd}
	if err := s.shm.register(r); err != nil {
		_ = fd.Close()
		return err
	}
	return nil
}

// UnregisterSystemSharedMemory implements backendapi.Backend ("" means
// all). A region still in use by a request is released when it ends.
func (s *Supervisor) UnregisterSystemSharedMemory(_ context.Context, name string) error {
	if !s.opts.AllowClientShm {
		return errClientShmDisabled
	}
	s.shm.unregister(name, false)
	return nil
}

// SystemSharedMemoryStatus implements backendapi.Backend.
// Status works with client shared memory disabled, as in Triton.
func (s *Supervisor) SystemSharedMemoryStatus(_ context.Context, name string) ([]backendapi.SystemSharedMemoryRegion, error) {
	rs := s.shm.list(name, false)
	if name != "" && len(rs) == 0 {
		if len(s.shm.list(name, true)) > 0 {
			return nil, backendapi.Errorf(backendapi.InvalidArg, "The region named '%s' is registered as CUDA shared memory, not system shared memory", name)
		}
		return nil, backendapi.Errorf(backendapi.NotFound, "Unable to find system shared memory region: '%s'", name)
	}
	out := make([]backendapi.SystemSharedMemoryRegion, 0, len(rs))
	for _, r := range rs {
		out = append(out, backendapi.SystemSharedMemoryRegion{Name: r.name, Key: r.key, Offset: r.offset, ByteSize: r.size})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// RegisterCUDASharedMemory implements backendapi.Backend: the handle is
// opened in the device's primary context through the CUDA driver, when
// there is one.
func (s *Supervisor) RegisterCUDASharedMemory(_ context.Context, name string, rawHandle []byte, deviceID int64, byteSize uint64) error {
	if !s.opts.AllowClientShm {
		return errClientShmDisabled
	}
	c, err := openCUDARegion(rawHandle, deviceID, byteSize)
	if err != nil {
		s.log.Debug("register CUDA shared memory", "name", name, "error", err)
		return backendapi.Errorf(backendapi.InvalidArg, "failed to register CUDA shared memory region: '%s', %s", name, cudaReason(err))
	}
	r := &shmRegion{name: name, size: byteSize, deviceID: deviceID, cuda: c}
	if err := s.shm.register(r); err != nil {
		c.close()
		return err
	}
	return nil
}

// UnregisterCUDASharedMemory implements backendapi.Backend.
func (s *Supervisor) UnregisterCUDASharedMemory(_ context.Context, name string) error {
	if !s.opts.AllowClientShm {
		return errClientShmDisabled
	}
	s.shm.unregister(name, true)
	return nil
}

// CUDASharedMemoryStatus implements backendapi.Backend.
func (s *Supervisor) CUDASharedMemoryStatus(_ context.Context, name string) ([]backendapi.CUDASharedMemoryRegion, error) {
	rs := s.shm.list(name, true)
	if name != "" && len(rs) == 0 {
		if len(s.shm.list(name, false)) > 0 {
			return nil, backendapi.Errorf(backendapi.InvalidArg, "The region named '%s' is registered as system shared memory, not CUDA shared memory", name)
		}
		return nil, backendapi.Errorf(backendapi.NotFound, "Unable to find cuda shared memory region: '%s'", name)
	}
	out := make([]backendapi.CUDASharedMemoryRegion, 0, len(rs))
	for _, r := range rs {
		out = append(out, backendapi.CUDASharedMemoryRegion{Name: r.name, DeviceID: r.deviceID, ByteSize: r.size})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
