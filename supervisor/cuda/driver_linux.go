package cuda

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// ipcMemHandle is CUipcMemHandle, passed to the driver by value (purego
// puts a 64-byte struct on the stack as the C ABI wants).
type ipcMemHandle struct {
	Reserved [HandleSize]byte
}

// Driver is a loaded CUDA driver. Its methods are safe for concurrent use.
type Driver struct {
	path    string
	devices int

	cuInit                   func(flags uint32) Result
	cuDeviceGetCount         func(count *int32) Result
	cuDeviceGet              func(dev *int32, ordinal int32) Result
	cuDevicePrimaryCtxRetain func(ctx *uintptr, dev int32) Result
	cuDevicePrimaryCtxRel    func(dev int32) Result
	cuCtxSetCurrent          func(ctx uintptr) Result
	cuIpcOpenMemHandle       func(ptr *uint64, h ipcMemHandle, flags uint32) Result
	cuIpcCloseMemHandle      func(ptr uint64) Result
	cuIpcGetMemHandle        func(h *ipcMemHandle, ptr uint64) Result
	cuMemGetAddressRange     func(base *uint64, size *uintptr, ptr uint64) Result
	cuMemcpyDtoH             func(dst unsafe.Pointer, src uint64, n uintptr) Result
	cuMemcpyHtoD             func(dst uint64, src unsafe.Pointer, n uintptr) Result
	cuMemAlloc               func(ptr *uint64, n uintptr) Result
	cuMemFree                func(ptr uint64) Result
	cuGetErrorName           func(code Result, name **byte) Result

	mu     sync.Mutex
	ctxs   map[int]uintptr // retained primary contexts by device ordinal
	closed bool
}

// ipcLazyEnablePeerAccess is CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, the one
// flag cuIpcOpenMemHandle accepts (Triton's server passes it too).
const ipcLazyEnablePeerAccess = 1

// Load opens the driver library (STUBVISOR_LIBCUDA or libcuda.so.1),
// binds its functions and initialises it. It fails with ErrNoDriver when
// there is no usable driver and ErrNoDevice when it sees no device.
func Load() (*Driver, error) {
	path := os.Getenv(EnvLibrary)
	if path == "" {
		path = DefaultLibrary
	}
	return LoadLibrary(path)
}

// LoadLibrary is Load from an explicit path.
func LoadLibrary(path string) (*Driver, error) {
	lib, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("load CUDA driver %s: %v: %w", path, err, ErrNoDriver)
	}
	d := &Driver{path: path, ctxs: map[int]uintptr{}}
	syms := []struct {
		fn   any
		name string
	}{
		{&d.cuInit, "cuInit"},
		{&d.cuDeviceGetCount, "cuDeviceGetCount"},
		{&d.cuDeviceGet, "cuDeviceGet"},
		{&d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"},
		{&d.cuDevicePrimaryCtxRel, "cuDevicePrimaryCtxRelease_v2"},
		{&d.cuCtxSetCurrent, "cuCtxSetCurrent"},
		{&d.cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2"},
		{&d.cuIpcCloseMemHandle, "cuIpcCloseMemHandle"},
		{&d.cuIpcGetMemHandle, "cuIpcGetMemHandle"},
		{&d.cuMemGetAddressRange, "cuMemGetAddressRange_v2"},
		{&d.cuMemcpyDtoH, "cuMemcpyDtoH_v2"},
		{&d.cuMemcpyHtoD, "cuMemcpyHtoD_v2"},
		{&d.cuMemAlloc, "cuMemAlloc_v2"},
		{&d.cuMemFree, "cuMemFree_v2"},
		{&d.cuGetErrorName, "cuGetErrorName"},
	}
	for _, s := range syms {
		sym, err := purego.Dlsym(lib, s.name)
		if err != nil {
			_ = purego.Dlclose(lib)
			return nil, fmt.Errorf("load CUDA driver %s: symbol %s: %v: %w", path, s.name, err, ErrNoDriver)
		}
		purego.RegisterFunc(s.fn, sym)
	}
	// From here on the library stays loaded for the life of the process:
	// an initialised driver owns threads and state that dlclose would pull
	// from under them.
	if err := d.check("cuInit", d.cuInit(0)); err != nil {
		if isCode(err, ErrorNoDevice) {
			return nil, fmt.Errorf("load CUDA driver %s: %w: %w", path, err, ErrNoDevice)
		}
		return nil, fmt.Errorf("load CUDA driver %s: %w: %w", path, err, ErrNoDriver)
	}
	var n int32
	if err := d.check("cuDeviceGetCount", d.cuDeviceGetCount(&n)); err != nil {
		return nil, fmt.Errorf("load CUDA driver %s: %w: %w", path, err, ErrNoDriver)
	}
	if n <= 0 {
		return nil, fmt.Errorf("load CUDA driver %s: %w", path, ErrNoDevice)
	}
	d.devices = int(n)
	return d, nil
}

func isCode(err error, code Result) bool {
	e, ok := err.(*Error)
	return ok && e.Code == code
}

// Path is the library the driver was loaded from.
func (d *Driver) Path() string { return d.path }

// DeviceCount is the number of devices the driver saw at Load.
func (d *Driver) DeviceCount() int { return d.devices }

// Close releases the primary contexts the driver retained. Mappings must
// be closed first.
func (d *Driver) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	d.closed = true
	for dev := range d.ctxs {
		_ = d.cuDevicePrimaryCtxRel(int32(dev))
	}
	d.ctxs = nil
}

// check turns a CUresult into an *Error (nil on success).
func (d *Driver) check(op string, rc Result) error {
	if rc == Success {
		return nil
	}
	e := &Error{Op: op, Code: rc}
	var name *byte
	if d.cuGetErrorName(rc, &name) == Success && name != nil {
		e.Name = goString(name)
	}
	return e
}

// goString copies a NUL-terminated C string (the driver's static texts).
func goString(p *byte) string {
	var n int
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 && n < 256 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// context returns the device's primary context, retaining it on first use.
func (d *Driver) context(device int) (uintptr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, fmt.Errorf("CUDA driver: %w", ErrClosed)
	}
	if ctx, ok := d.ctxs[device]; ok {
		return ctx, nil
	}
	if device < 0 || device >= d.devices {
		return 0, fmt.Errorf("device %d of %d: %w", device, d.devices, ErrInvalidDevice)
	}
	var dev int32
	if err := d.check("cuDeviceGet", d.cuDeviceGet(&dev, int32(device))); err != nil {
		return 0, err
	}
	var ctx uintptr
	if err := d.check("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(&ctx, dev)); err != nil {
		return 0, err
	}
	d.ctxs[device] = ctx
	return ctx, nil
}

// on runs f on a locked OS thread with the device's primary context
// current.
func (d *Driver) on(device int, f func() error) error {
	ctx, err := d.context(device)
	if err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.check("cuCtxSetCurrent", d.cuCtxSetCurrent(ctx)); err != nil {
		return err
	}
	return f()
}

// Mapping is device memory this process can address: an IPC handle opened
// with OpenIPCHandle, or an allocation made with Alloc.
type Mapping struct {
	d      *Driver
	Device int
	Ptr    uint64 // device pointer
	Size   uint64 // bytes from Ptr to the end of the allocation
	owned  bool   // Alloc: freed on Close; else closed as an IPC handle

	mu     sync.Mutex
	closed bool
}

// OpenIPCHandle opens a client's cudaIpcMemHandle_t on device and learns
// the allocation's extent with cuMemGetAddressRange.
func (d *Driver) OpenIPCHandle(device int, handle []byte) (*Mapping, error) {
	if len(handle) != HandleSize {
		return nil, fmt.Errorf("open CUDA IPC handle: %d bytes, want %d: %w", len(handle), HandleSize, ErrInvalidHandle)
	}
	var h ipcMemHandle
	copy(h.Reserved[:], handle)
	m := &Mapping{d: d, Device: device}
	err := d.on(device, func() error {
		if err := d.check("cuIpcOpenMemHandle", d.cuIpcOpenMemHandle(&m.Ptr, h, ipcLazyEnablePeerAccess)); err != nil {
			return err
		}
		var base uint64
		var size uintptr
		if err := d.check("cuMemGetAddressRange", d.cuMemGetAddressRange(&base, &size, m.Ptr)); err != nil {
			_ = d.cuIpcCloseMemHandle(m.Ptr)
			return err
		}
		if m.Ptr < base || m.Ptr-base > uint64(size) {
			_ = d.cuIpcCloseMemHandle(m.Ptr)
			return fmt.Errorf("cuMemGetAddressRange: pointer %#x outside [%#x, +%d): %w", m.Ptr, base, size, ErrOutOfRange)
		}
		m.Size = uint64(size) - (m.Ptr - base)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("open CUDA IPC handle on device %d: %w", device, err)
	}
	return m, nil
}

// Alloc allocates size bytes on device (the client's part, for tests and
// benchmarks).
func (d *Driver) Alloc(device int, size uint64) (*Mapping, error) {
	m := &Mapping{d: d, Device: device, Size: size, owned: true}
	err := d.on(device, func() error {
		return d.check("cuMemAlloc", d.cuMemAlloc(&m.Ptr, uintptr(size)))
	})
	if err != nil {
		return nil, fmt.Errorf("allocate %d bytes on CUDA device %d: %w", size, device, err)
	}
	return m, nil
}

// IPCHandle exports the allocation as a cudaIpcMemHandle_t for another
// process.
func (m *Mapping) IPCHandle() ([]byte, error) {
	var h ipcMemHandle
	err := m.use(func() error {
		return m.d.check("cuIpcGetMemHandle", m.d.cuIpcGetMemHandle(&h, m.Ptr))
	})
	if err != nil {
		return nil, fmt.Errorf("export CUDA IPC handle: %w", err)
	}
	return h.Reserved[:], nil
}

// use runs f with the mapping open and its device current.
func (m *Mapping) use(f func() error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	return m.d.on(m.Device, f)
}

// span checks [offset, offset+n) against the mapping.
func (m *Mapping) span(offset uint64, n int) error {
	if offset > m.Size || uint64(n) > m.Size-offset {
		return fmt.Errorf("[%d, +%d) of %d bytes: %w", offset, n, m.Size, ErrOutOfRange)
	}
	return nil
}

// CopyToHost copies len(dst) bytes at offset into dst.
func (m *Mapping) CopyToHost(dst []byte, offset uint64) error {
	if err := m.span(offset, len(dst)); err != nil {
		return fmt.Errorf("copy from CUDA device: %w", err)
	}
	if len(dst) == 0 {
		return nil
	}
	err := m.use(func() error {
		return m.d.check("cuMemcpyDtoH", m.d.cuMemcpyDtoH(unsafe.Pointer(&dst[0]), m.Ptr+offset, uintptr(len(dst))))
	})
	if err != nil {
		return fmt.Errorf("copy from CUDA device: %w", err)
	}
	return nil
}

// CopyFromHost copies src to offset.
func (m *Mapping) CopyFromHost(offset uint64, src []byte) error {
	if err := m.span(offset, len(src)); err != nil {
		return fmt.Errorf("copy to CUDA device: %w", err)
	}
	if len(src) == 0 {
		return nil
	}
	err := m.use(func() error {
		return m.d.check("cuMemcpyHtoD", m.d.cuMemcpyHtoD(m.Ptr+offset, unsafe.Pointer(&src[0]), uintptr(len(src))))
	})
	if err != nil {
		return fmt.Errorf("copy to CUDA device: %w", err)
	}
	return nil
}

// Close closes the IPC handle (or frees the allocation). Idempotent.
func (m *Mapping) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	err := m.d.on(m.Device, func() error {
		if m.owned {
			return m.d.check("cuMemFree", m.d.cuMemFree(m.Ptr))
		}
		return m.d.check("cuIpcCloseMemHandle", m.d.cuIpcCloseMemHandle(m.Ptr))
	})
	if err != nil {
		return fmt.Errorf("close CUDA memory: %w", err)
	}
	return nil
}
