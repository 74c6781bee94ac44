package supervisor

import (
	"context"
	"errors"
	"math"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/stubvisor/stubvisor/backendapi"
)

// Client shared memory. The supervisor keeps each registered region's fd
// and maps nothing itself: tensors in a region go to the stub as LocClient
// descriptors, and a stub maps a region the first time a request uses it
// (the fd travels over the stub's lifeline socket, then a MapRegion on the
// ring). A region stays mapped in a stub until it is unregistered and no
// request uses it any more; then each stub that mapped it gets an
// UnmapRegion and the fd is closed. So a tensor never crosses the
// supervisor's memory, and an unregistered region leaves nothing behind.

// ErrBadShmKey is wrapped by register errors for keys outside /dev/shm.
var ErrBadShmKey = errors.New("shared memory key is not a POSIX shm object name")

// clientShm is the supervisor's registry of client regions (system and
// CUDA share one namespace, as in Triton; CUDA regions are described in
// clientshm_cuda.go). The zero value is ready.
type clientShm struct {
	mu      sync.Mutex
	nextID  uint64
	regions map[string]*shmRegion
}

// shmRegion is one registered region.
type shmRegion struct {
	id       uint64
	name     string
	key      string
	offset   uint64
	size     uint64
	deviceID int64    // CUDA regions: the device; -1 for system regions
	fd       *os.File // system regions
	cuda     *cudaRegion

	refs    int                    // requests that use the region now
	dropped bool                   // unregistered; closed once refs is zero
	stubs   map[*stubProc]struct{} // stubs that mapped it
}

// register adds a region under name, or fails with Triton's text when the
// name is taken.
func (c *clientShm) register(r *shmRegion) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.regions[r.name]; ok {
		return backendapi.Errorf(backendapi.AlreadyExists, "shared memory region '%s' already in manager", r.name)
	}
	if c.regions == nil {
		c.regions = map[string]*shmRegion{}
	}
	c.nextID++
	r.id = c.nextID
	r.stubs = map[*stubProc]struct{}{}
	c.regions[r.name] = r
	return nil
}

// unregister removes regions by name ("" means all of the kind). As in
// Triton, a region still in use by a request is only marked: it stays
// listed and usable (a request may still name it) until its last request
// ends, and is removed and closed then. cuda picks the kind.
func (c *clientShm) unregister(name string, cuda bool) {
	var closeNow []*shmRegion
	c.mu.Lock()
	for n, r := range c.regions {
		if (name != "" && n != name) || (r.cuda != nil) != cuda {
			continue
		}
		r.dropped = true
		if r.refs == 0 {
			delete(c.regions, n)
			closeNow = append(closeNow, r)
		}
	}
	c.mu.Unlock()
	for _, r := range closeNow {
		c.closeRegion(r)
	}
}

// closeAll drops every region (server shutdown, after the stubs stopped).
func (c *clientShm) closeAll() {
	c.unregister("", false)
	c.unregister("", true)
}

// list returns the regions of one kind, by name when name is not "".
func (c *clientShm) list(name string, cuda bool) []*shmRegion {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*shmRegion
	for n, r := range c.regions {
		if (name == "" || n == name) && (r.cuda != nil) == cuda {
			out = append(out, r)
		}
	}
	return out
}

// status is the Status endpoints' lookup: the regions of one kind sorted
// by name, or Triton's error when name is set and names none of that kind
// (its texts spell the kinds "system" and "CUDA", and "cuda" when missing).
func (c *clientShm) status(name string, cuda bool) ([]*shmRegion, error) {
	kind, other, missing := "system", "CUDA", "system"
	if cuda {
		kind, other, missing = "CUDA", "system", "cuda"
	}
	rs := c.list(name, cuda)
	if name != "" && len(rs) == 0 {
		if len(c.list(name, !cuda)) > 0 {
			return nil, backendapi.Errorf(backendapi.InvalidArg, "The region named '%s' is registered as %s shared memory, not %s shared memory", name, other, kind)
		}
		return nil, backendapi.Errorf(backendapi.NotFound, "Unable to find %s shared memory region: '%s'", missing, name)
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].name < rs[j].name })
	return rs, nil
}

// acquire finds the region a tensor names and checks the tensor's place
// in it (Triton's texts); the caller releases it when the request ends.
func (c *clientShm) acquire(ref *backendapi.SharedMemoryRef) (*shmRegion, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.regions[ref.Region]
	if !ok {
		return nil, backendapi.Errorf(backendapi.NotFound, "Unable to find shared memory region: '%s'", ref.Region)
	}
	if ref.Offset >= r.size && !(ref.Offset == 0 && r.size == 0) {
		return nil, backendapi.Errorf(backendapi.InvalidArg, "Invalid offset for shared memory region: '%s'", ref.Region)
	}
	if ref.ByteSize > math.MaxUint64-ref.Offset {
		return nil, backendapi.Errorf(backendapi.InvalidArg, "Integer overflow detected: byte_size (%d) + offset (%d) exceeds maximum value (%d) for region '%s'", ref.ByteSize, ref.Offset, uint64(math.MaxUint64), ref.Region)
	}
	if ref.ByteSize > r.size-ref.Offset {
		return nil, backendapi.Errorf(backendapi.InvalidArg, "Invalid offset + byte size for shared memory region: '%s'", ref.Region)
	}
	// The client may have shrunk the object since it registered it; a stub
	// touching the missing pages would die of SIGBUS. (It can still shrink
	// it while a request runs; the stub is then restarted like any crash.)
	if r.fd != nil {
		if fi, err := r.fd.Stat(); err != nil || fi.Size() < int64(r.offset+r.size) {
			return nil, backendapi.Errorf(backendapi.InvalidArg, "shared memory region '%s' is smaller than when it was registered: its object '%s' no longer holds %d bytes at offset %d", ref.Region, r.key, r.size, r.offset)
		}
	}
	r.refs++
	return r, nil
}

// release ends one use of each region; the last use of an unregistered
// region closes it.
func (c *clientShm) release(rs []*shmRegion) {
	var closeNow []*shmRegion
	c.mu.Lock()
	for _, r := range rs {
		r.refs--
		if r.refs == 0 && r.dropped {
			if c.regions[r.name] == r {
				delete(c.regions, r.name)
			}
			closeNow = append(closeNow, r)
		}
	}
	c.mu.Unlock()
	for _, r := range closeNow {
		c.closeRegion(r)
	}
}

// closeRegion unmaps the region from every stub that mapped it and closes
// the fd. It runs once, with no request using the region.
func (c *clientShm) closeRegion(r *shmRegion) {
	c.mu.Lock()
	stubs := r.stubs
	r.stubs = nil
	c.mu.Unlock()
	for p := range stubs {
		p.shm.unmap(p, r)
	}
	if r.fd != nil {
		_ = r.fd.Close()
	}
	if r.cuda != nil {
		r.cuda.close()
	}
}

// errClientShmDisabled is Triton's text when client shared memory is off.
var errClientShmDisabled = backendapi.Errorf(backendapi.Unsupported, "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.")

// RegisterSystemSharedMemory implements backendapi.Backend. The supervisor
// keeps the object's fd (the client may unlink the name) and maps nothing.
func (s *Supervisor) RegisterSystemSharedMemory(_ context.Context, name, key string, offset, byteSize uint64) error {
	if !s.opts.AllowClientShm {
		return errClientShmDisabled
	}
	if err := validateShmKey(name, key); err != nil {
		return err
	}
	fd, size, err := openShmKey(key)
	if err != nil {
		s.log.Debug("register system shared memory", "name", name, "key", key, "error", err)
		// A key that names no object is Triton's INTERNAL; one that names
		// something other than a shm object (a path, a symlink, a FIFO, a
		// device) is the client's error.
		code := backendapi.Internal
		if errors.Is(err, ErrBadShmKey) {
			code = backendapi.InvalidArg
		}
		return backendapi.Errorf(code, "Unable to open shared memory region: '%s'", key)
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
	rs, err := s.shm.status(name, false)
	if err != nil {
		return nil, err
	}
	out := make([]backendapi.SystemSharedMemoryRegion, 0, len(rs))
	for _, r := range rs {
		out = append(out, backendapi.SystemSharedMemoryRegion{Name: r.name, Key: r.key, Offset: r.offset, ByteSize: r.size})
	}
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
	rs, err := s.shm.status(name, true)
	if err != nil {
		return nil, err
	}
	out := make([]backendapi.CUDASharedMemoryRegion, 0, len(rs))
	for _, r := range rs {
		out = append(out, backendapi.CUDASharedMemoryRegion{Name: r.name, DeviceID: r.deviceID, ByteSize: r.size})
	}
	return out, nil
}

// reservedShmPrefix starts the names of the Python backend's own regions in
// Triton; a client may not register a key that starts with it.
const reservedShmPrefix = "triton_python_backend_shm_region_"

// validateShmKey applies Triton's checks on a system region's key: it must
// name something after its leading slashes, and not the reserved prefix.
func validateShmKey(name, key string) error {
	rest := strings.TrimLeft(key, "/")
	if rest == "" {
		return backendapi.Errorf(backendapi.InvalidArg, "cannot register shared memory region '%s' - invalid shm key '%s'", name, key)
	}
	if strings.HasPrefix(rest, reservedShmPrefix) {
		return backendapi.Errorf(backendapi.InvalidArg, "cannot register shared memory region '%s' with key '%s' as the key contains the reserved prefix '%s'", name, key, reservedShmPrefix)
	}
	return nil
}
