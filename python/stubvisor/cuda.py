"""The CUDA driver API through ctypes, for CUDA shared memory.

A client registers a CUDA region with the server by its cudaIpcMemHandle_t;
the supervisor checks it and sends the handle and device to this stub in
MapRegion. The stub opens the handle itself the first time a tensor uses
the region (so a stub that never sees a CUDA tensor never loads a driver),
and closes it on UnmapRegion once no DLPack export of its memory lives.

The library is libcuda.so.1, or STUBVISOR_LIBCUDA when set (the supervisor
passes its own environment on, so tests can point both at a fake driver).
Every call that needs a context first makes the device's primary context
current on the calling thread: the model may call from any thread.
"""

import ctypes
import os
import threading

import numpy as np

from .clientshm import checked_region

ENV_LIBRARY = "STUBVISOR_LIBCUDA"
DEFAULT_LIBRARY = "libcuda.so.1"
HANDLE_SIZE = 64

_SUCCESS = 0
_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1


class CudaError(Exception):
    """A driver call failed (or there is no driver)."""

    def __init__(self, op, code=None, name=None):
        self.op = op
        self.code = code
        self.name = name
        if code is None:
            text = op
        else:
            text = "%s: %s" % (op, name or "CUresult %d" % code)
        super().__init__(text)


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * HANDLE_SIZE)]


_CU = ctypes.c_int
_PTR = ctypes.c_uint64

_SIGNATURES = {
    "cuInit": [ctypes.c_uint],
    "cuDeviceGetCount": [ctypes.POINTER(ctypes.c_int)],
    "cuDeviceGet": [ctypes.POINTER(ctypes.c_int), ctypes.c_int],
    "cuDevicePrimaryCtxRetain": [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int],
    "cuCtxSetCurrent": [ctypes.c_void_p],
    "cuIpcOpenMemHandle_v2": [ctypes.POINTER(_PTR), _Handle, ctypes.c_uint],
    "cuIpcCloseMemHandle": [_PTR],
    "cuMemGetAddressRange_v2": [ctypes.POINTER(_PTR), ctypes.POINTER(ctypes.c_size_t), _PTR],
    "cuMemcpyDtoH_v2": [ctypes.c_void_p, _PTR, ctypes.c_size_t],
    "cuMemcpyHtoD_v2": [_PTR, ctypes.c_void_p, ctypes.c_size_t],
    "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
}


class Driver:
    """A loaded, initialised driver."""

    def __init__(self, path=None):
        path = path or os.environ.get(ENV_LIBRARY) or DEFAULT_LIBRARY
        try:
            lib = ctypes.CDLL(path)
        except OSError as exc:
            raise CudaError("cannot load the CUDA driver %s: %s" % (path, exc)) from None
        self.path = path
        self._fn = {}
        for name, argtypes in _SIGNATURES.items():
            try:
                fn = getattr(lib, name)
            except AttributeError:
                raise CudaError("CUDA driver %s lacks %s" % (path, name)) from None
            fn.argtypes = argtypes
            fn.restype = _CU
            self._fn[name] = fn
        self._ctx = {}
        self._lock = threading.Lock()
        self._check("cuInit", self._fn["cuInit"](0))
        count = ctypes.c_int(0)
        self._check("cuDeviceGetCount", self._fn["cuDeviceGetCount"](ctypes.byref(count)))
        self.devices = count.value

    def _check(self, op, rc):
        if rc != _SUCCESS:
            name = ctypes.c_char_p()
            text = None
            if self._fn["cuGetErrorName"](rc, ctypes.byref(name)) == _SUCCESS and name.value:
                text = name.value.decode("ascii", "replace")
            raise CudaError(op, rc, text)

    def _current(self, device):
        """Make device's primary context current on this thread."""
        ctx = self._ctx.get(device)
        if ctx is None:
            with self._lock:
                ctx = self._ctx.get(device)
                if ctx is None:
                    if not 0 <= device < self.devices:
                        raise CudaError("invalid CUDA device %d (%d devices)" % (device, self.devices))
                    dev = ctypes.c_int(0)
                    self._check("cuDeviceGet", self._fn["cuDeviceGet"](ctypes.byref(dev), device))
                    c = ctypes.c_void_p()
                    self._check("cuDevicePrimaryCtxRetain",
                                self._fn["cuDevicePrimaryCtxRetain"](ctypes.byref(c), dev.value))
                    ctx = self._ctx[device] = c.value
        self._check("cuCtxSetCurrent", self._fn["cuCtxSetCurrent"](ctx))

    def open_ipc(self, device, handle):
        """Open a cudaIpcMemHandle_t; returns (device pointer, bytes from
        it to the end of the allocation)."""
        if len(handle) != HANDLE_SIZE:
            raise CudaError("CUDA IPC handle of %d bytes, want %d" % (len(handle), HANDLE_SIZE))
        self._current(device)
        h = _Handle()
        ctypes.memmove(ctypes.addressof(h), bytes(handle), HANDLE_SIZE)
        ptr = _PTR(0)
        self._check("cuIpcOpenMemHandle",
                    self._fn["cuIpcOpenMemHandle_v2"](ctypes.byref(ptr), h, _IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        base, size = _PTR(0), ctypes.c_size_t(0)
        try:
            self._check("cuMemGetAddressRange",
                        self._fn["cuMemGetAddressRange_v2"](ctypes.byref(base), ctypes.byref(size), ptr))
        except CudaError:
            self._fn["cuIpcCloseMemHandle"](ptr)
            raise
        return ptr.value, size.value - (ptr.value - base.value)

    def close_ipc(self, device, ptr):
        self._current(device)
        self._check("cuIpcCloseMemHandle", self._fn["cuIpcCloseMemHandle"](ptr))

    def to_host(self, device, dst_address, src_ptr, size):
        if size:
            self._current(device)
            self._check("cuMemcpyDtoH", self._fn["cuMemcpyDtoH_v2"](dst_address, src_ptr, size))

    def to_device(self, device, dst_ptr, src_address, size):
        if size:
            self._current(device)
            self._check("cuMemcpyHtoD", self._fn["cuMemcpyHtoD_v2"](dst_ptr, src_address, size))


_driver = None
_driver_lock = threading.Lock()


def driver():
    """The process's driver, loaded on first use."""
    global _driver
    if _driver is None:
        with _driver_lock:
            if _driver is None:
                _driver = Driver()
    return _driver


class _Region:
    __slots__ = ("handle", "device", "offset", "size", "ptr", "leases", "dropped")

    def __init__(self, handle, device, offset, size):
        self.handle = bytes(handle)
        self.device = device
        self.offset = offset
        self.size = size
        self.ptr = None  # device pointer of the opened handle; None until first use
        self.leases = 0  # DLPack exports that point into the region
        self.dropped = False


class Lease:
    """Keeps a region's handle open while a DLPack export points into it;
    the handle may close once the last lease is gone."""

    __slots__ = ("_regions", "_region", "__weakref__")

    def __init__(self, regions, region):
        self._regions = regions
        self._region = region
        region.leases += 1

    def __del__(self):
        self._regions._unlease(self._region)


class CudaRegions:
    """The CUDA regions the supervisor described to this stub, by region
    id. Handles open on first use and close on unmap once no lease is out."""

    def __init__(self, load=driver):
        self._load = load
        self._regions = {}
        # Reentrant: a Lease may be collected on a thread that holds it.
        self._lock = threading.RLock()

    def map(self, region_id, offset, size, handle, device):
        """Handle MapRegion for a CUDA region: remember it; open later."""
        with self._lock:
            old = self._regions.pop(region_id, None)
            self._regions[region_id] = _Region(handle, int(device), offset, size)
        if old is not None:
            self._drop(old)

    def unmap(self, region_id):
        """Handle UnmapRegion (a no-op for ids that are not CUDA regions)."""
        with self._lock:
            region = self._regions.pop(region_id, None)
        if region is not None:
            self._drop(region)

    def has(self, region_id):
        return region_id in self._regions

    def mapped(self):
        """Ids of the regions known now, and which of them are open (tests)."""
        with self._lock:
            return sorted(self._regions), sorted(k for k, r in self._regions.items() if r.ptr is not None)

    def _drop(self, region):
        with self._lock:
            region.dropped = True
            ptr = region.ptr if region.leases == 0 else None
            if ptr is not None:
                region.ptr = None
        if ptr is not None:
            self._load().close_ipc(region.device, ptr)

    def _unlease(self, region):
        with self._lock:
            region.leases -= 1
            close = region.dropped and region.leases == 0 and region.ptr is not None
            ptr = region.ptr
            if close:
                region.ptr = None
        if close:
            try:
                self._load().close_ipc(region.device, ptr)
            except CudaError:
                pass  # a finaliser has nobody to report to; the process exit closes it

    def place(self, region_id, offset, size):
        """(device, device pointer) of [offset, offset+size) in a region,
        opening its handle on first use. Raises ValueError outside it."""
        region = checked_region(self._regions, "CUDA", region_id, offset, size)
        if region.ptr is None:
            with self._lock:
                if region.ptr is None:
                    ptr, extent = self._load().open_ipc(region.device, region.handle)
                    if region.offset + region.size > extent:
                        self._load().close_ipc(region.device, ptr)
                        raise ValueError("CUDA shared memory region %d: %d bytes at offset %d exceed the "
                                         "allocation's %d" % (region_id, region.size, region.offset, extent))
                    region.ptr = ptr
        return region.device, region.ptr + region.offset + offset

    def lease(self, region_id):
        """A Lease that keeps the region's handle open while it lives."""
        region = self._regions.get(region_id)
        if region is None:
            raise ValueError("CUDA shared memory region %d is not mapped in this stub" % region_id)
        with self._lock:
            return Lease(self, region)

    def read(self, region_id, offset, size):
        """A host copy (bytearray) of size bytes at offset."""
        device, ptr = self.place(region_id, offset, size)
        out = bytearray(size)
        if size:
            addr = ctypes.addressof((ctypes.c_char * size).from_buffer(out))
            self._load().to_host(device, addr, ptr, size)
        return out

    def write(self, region_id, offset, data):
        """Copy bytes-like data to offset."""
        view = memoryview(data).cast("B")
        size = view.nbytes
        device, ptr = self.place(region_id, offset, size)
        if size:
            src = np.frombuffer(view, dtype=np.uint8)  # an address even for read-only data
            self._load().to_device(device, ptr, src.ctypes.data, size)
