// Package clientshm is the registry of client shared-memory regions
// (system and CUDA): registering, listing, checking a tensor's place in a
// region and counting the requests that use it. It knows nothing of stubs
// beyond the Mapper each region tells to let go of it.
//
// The supervisor keeps each registered region's fd and maps nothing
// itself: tensors in a region go to the stub as LocClient descriptors, and
// a stub maps a region the first time a request uses it (the fd travels
// over the stub's lifeline socket, then a MapRegion on the ring). A region
// stays mapped in a stub until it is unregistered and no request uses it
// any more; then each stub that mapped it gets an UnmapRegion and the fd is
// closed. So a tensor never crosses the supervisor's memory, and an
// unregistered region leaves nothing behind.
//
// # Files
//
//	registry.go     Registry, Region: register, acquire, release, status
//	cuda.go         CUDA regions: the driver, opening an IPC handle
//	open_linux.go   a system region's key opened under /dev/shm (open_other.go elsewhere)
//
// # Locks
//
// Registry.mu is a leaf except for closeRegion, which releases it before
// telling the mappers; a stub's own region lock (stubproc) is taken
// before it. The cuda package's two mutexes are leaves. No goroutine is
// started here.
package clientshm

import (
	"errors"
	"math"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/stubvisor/stubvisor/backendapi"
)

// ErrBadShmKey is wrapped by register errors for keys outside /dev/shm.
var ErrBadShmKey = errors.New("shared memory key is not a POSIX shm object name")

// Registry is the supervisor's registry of client regions (system and
// CUDA share one namespace, as in Triton; CUDA regions are described in
// cuda.go). The zero value is ready.
type Registry struct {
	// Log, when set, gets the detail of a refused registration.
	Log hclog.Logger

	mu      sync.Mutex
	nextID  uint64
	regions map[string]*Region
}

// Region is one registered region.
type Region struct {
	id       uint64
	name     string
	key      string
	offset   uint64
	size     uint64
	deviceID int64    // CUDA regions: the device; -1 for system regions
	fd       *os.File // system regions
	cuda     *cudaRegion

	refs    int                 // requests that use the region now
	dropped bool                // unregistered; closed once refs is zero
	stubs   map[Mapper]struct{} // stubs that mapped it
}

// register adds a region under name, or fails with Triton's text when the
// name is taken.
func (c *Registry) register(r *Region) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.regions[r.name]; ok {
		return backendapi.Errorf(backendapi.AlreadyExists, "shared memory region '%s' already in manager", r.name)
	}
	if c.regions == nil {
		c.regions = map[string]*Region{}
	}
	c.nextID++
	r.id = c.nextID
	r.stubs = map[Mapper]struct{}{}
	c.regions[r.name] = r
	return nil
}

// unregister removes regions by name ("" means all of the kind). As in
// Triton, a region still in use by a request is only marked: it stays
// listed and usable (a request may still name it) until its last request
// ends, and is removed and closed then. cuda picks the kind.
func (c *Registry) Unregister(name string, cuda bool) {
	var closeNow []*Region
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
func (c *Registry) CloseAll() {
	c.Unregister("", false)
	c.Unregister("", true)
}

// list returns the regions of one kind, by name when name is not "".
func (c *Registry) list(name string, cuda bool) []*Region {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Region
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
func (c *Registry) status(name string, cuda bool) ([]*Region, error) {
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
func (c *Registry) Acquire(ref *backendapi.SharedMemoryRef) (*Region, error) {
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
func (c *Registry) Release(rs []*Region) {
	var closeNow []*Region
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
func (c *Registry) closeRegion(r *Region) {
	c.mu.Lock()
	stubs := r.stubs
	r.stubs = nil
	c.mu.Unlock()
	for m := range stubs {
		m.Unmap(r)
	}
	if r.fd != nil {
		_ = r.fd.Close()
	}
	if r.cuda != nil {
		r.cuda.close()
	}
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

// Mapper is a stub that mapped a region: Unmap tells it to let go.
type Mapper interface{ Unmap(r *Region) }

// ID is the region's id in MapRegion and tensor descriptors.
func (r *Region) ID() uint64 { return r.id }

// Name is the name the client registered the region under.
func (r *Region) Name() string { return r.name }

// Window is the registered part of the object: its offset and size.
func (r *Region) Window() (offset, size uint64) { return r.offset, r.size }

// FD is a system region's file, nil for a CUDA region.
func (r *Region) FD() *os.File { return r.fd }

// CUDA is a CUDA region's IPC handle and device; ok is false for a system
// region.
func (r *Region) CUDA() (handle []byte, device int64, ok bool) {
	if r.cuda == nil {
		return nil, 0, false
	}
	return r.cuda.handle, r.cuda.device, true
}

// AddMapper records that m mapped r, so r's close unmaps it there.
func (c *Registry) AddMapper(r *Region, m Mapper) {
	c.mu.Lock()
	if r.stubs != nil {
		r.stubs[m] = struct{}{}
	}
	c.mu.Unlock()
}

// ForgetMapper drops m from the regions it had mapped (its process is
// gone).
func (c *Registry) ForgetMapper(m Mapper, rs []*Region) {
	c.mu.Lock()
	for _, r := range rs {
		delete(r.stubs, m)
	}
	c.mu.Unlock()
}

// errDisabled is Triton's text when client shared memory is off.
var errDisabled = backendapi.Errorf(backendapi.Unsupported, "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.")

// Disabled is the error of every register and unregister call while
// client shared memory is off.
func Disabled() error { return errDisabled }

// RegisterSystem registers a system region: the registry keeps the
// object's fd (the client may unlink the name) and maps nothing.
func (c *Registry) RegisterSystem(name, key string, offset, byteSize uint64) error {
	if err := validateShmKey(name, key); err != nil {
		return err
	}
	fd, size, err := openShmKey(key)
	if err != nil {
		c.debug("register system shared memory", "name", name, "key", key, "error", err)
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
	r := &Region{name: name, key: key, offset: offset, size: byteSize, deviceID: -1, fd: fd}
	if err := c.register(r); err != nil {
		_ = fd.Close()
		return err
	}
	return nil
}

// RegisterCUDA registers a CUDA region: the handle is opened in the
// device's primary context through the CUDA driver, when there is one.
func (c *Registry) RegisterCUDA(name string, rawHandle []byte, deviceID int64, byteSize uint64) error {
	cr, err := openCUDARegion(rawHandle, deviceID, byteSize)
	if err != nil {
		c.logError("failed to register CUDA shared memory", "name", name, "error", err)
		return cudaRegisterError(name, err)
	}
	r := &Region{name: name, size: byteSize, deviceID: deviceID, cuda: cr}
	if err := c.register(r); err != nil {
		cr.close()
		return err
	}
	return nil
}

// SystemStatus lists the system regions (one when name is set).
func (c *Registry) SystemStatus(name string) ([]backendapi.SystemSharedMemoryRegion, error) {
	rs, err := c.status(name, false)
	if err != nil {
		return nil, err
	}
	out := make([]backendapi.SystemSharedMemoryRegion, 0, len(rs))
	for _, r := range rs {
		out = append(out, backendapi.SystemSharedMemoryRegion{Name: r.name, Key: r.key, Offset: r.offset, ByteSize: r.size})
	}
	return out, nil
}

// CUDAStatus lists the CUDA regions (one when name is set).
func (c *Registry) CUDAStatus(name string) ([]backendapi.CUDASharedMemoryRegion, error) {
	rs, err := c.status(name, true)
	if err != nil {
		return nil, err
	}
	out := make([]backendapi.CUDASharedMemoryRegion, 0, len(rs))
	for _, r := range rs {
		out = append(out, backendapi.CUDASharedMemoryRegion{Name: r.name, DeviceID: r.deviceID, ByteSize: r.size})
	}
	return out, nil
}

// logError logs the cause of a refusal whose answer to the client does not
// carry it.
func (c *Registry) logError(msg string, args ...any) {
	if c.Log != nil {
		c.Log.Error(msg, args...)
	}
}

func (c *Registry) debug(msg string, args ...any) {
	if c.Log != nil {
		c.Log.Debug(msg, args...)
	}
}
