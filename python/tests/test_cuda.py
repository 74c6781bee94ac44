"""CUDA shared memory in the stub, against the fake driver.

supervisor/cuda/testdata/fakecuda.c is a test fixture: the CUDA driver API
over host memory (memfds). A helper process plays the client: it allocates
"device" memory, fills it and exports an IPC handle, because CUDA refuses
to open a handle in the process that made it. Skipped without gcc.
"""

import ctypes
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

import triton_python_backend_utils as pb
from stubvisor import cuda

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_FAKE_SRC = os.path.join(_ROOT, "supervisor", "cuda", "testdata", "fakecuda.c")
_SIZE = 4096

# The client: allocate, fill byte i with i % 251, print the handle, then
# answer "read OFF N" with the hex of those bytes until stdin closes.
_OWNER = r"""
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
assert lib.cuInit(0) == 0
ctx = ctypes.c_void_p()
assert lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert lib.cuCtxSetCurrent(ctx) == 0
ptr = ctypes.c_uint64()
assert lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(%d)) == 0
data = bytes(i %% 251 for i in range(%d))
assert lib.cuMemcpyHtoD_v2(ptr, data, ctypes.c_size_t(len(data))) == 0
h = (ctypes.c_char * 64)()
assert lib.cuIpcGetMemHandle(h, ptr) == 0
print(bytes(h).hex(), flush=True)
for line in sys.stdin:
    _, off, n = line.split()
    buf = ctypes.create_string_buffer(int(n))
    assert lib.cuMemcpyDtoH_v2(buf, ctypes.c_uint64(ptr.value + int(off)), ctypes.c_size_t(int(n))) == 0
    print(buf.raw.hex(), flush=True)
""" % (_SIZE, _SIZE)


def _fake_mappings():
    """How many fake device mappings this process holds (/proc/self/maps)."""
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if "memfd:fakecuda" in line)


@unittest.skipUnless(shutil.which("gcc"), "gcc not found: the fake CUDA driver cannot be built")
class CudaTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._dir = tempfile.mkdtemp(prefix="stubvisor-fakecuda-")
        cls.lib = os.path.join(cls._dir, "libfakecuda.so")
        subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", cls.lib, _FAKE_SRC], check=True)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls._dir, ignore_errors=True)

    def setUp(self):
        self.owner = subprocess.Popen([sys.executable, "-c", _OWNER, self.lib], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)
        self.addCleanup(self._stop_owner)
        self.handle = bytes.fromhex(self.owner.stdout.readline().strip())
        self.assertEqual(len(self.handle), 64)
        self.driver = cuda.Driver(self.lib)
        self.regions = cuda.CudaRegions(load=lambda: self.driver)
        self.before = _fake_mappings()

    def _stop_owner(self):
        self.owner.stdin.close()
        try:
            self.owner.wait(timeout=10)
        finally:
            if self.owner.poll() is None:
                self.owner.kill()
                self.owner.wait()
            self.owner.stdout.close()

    def owner_read(self, offset, n):
        self.owner.stdin.write("read %d %d\n" % (offset, n))
        self.owner.stdin.flush()
        return bytes.fromhex(self.owner.stdout.readline().strip())

    def test_driver_load_failures(self):
        cases = {"missing library": "/nonexistent/libcuda.so.1", "not a driver": "libc.so.6"}
        for name, path in cases.items():
            with self.subTest(name):
                with self.assertRaises(cuda.CudaError):
                    cuda.Driver(path)

    def test_bad_handle(self):
        with self.assertRaises(cuda.CudaError) as cm:
            self.driver.open_ipc(0, b"\xab" * 64)
        self.assertEqual(cm.exception.name, "CUDA_ERROR_INVALID_HANDLE")

    def test_read_write_lazy_open_and_close(self):
        self.regions.map(5, 0, _SIZE, self.handle, 0)
        self.assertEqual(self.regions.mapped(), ([5], []))  # not opened until used
        self.assertEqual(bytes(self.regions.read(5, 100, 8)), bytes(i % 251 for i in range(100, 108)))
        self.assertEqual(self.regions.mapped(), ([5], [5]))
        self.regions.write(5, 2000, np.arange(4, dtype=np.float32))
        self.assertEqual(self.owner_read(2000, 16), np.arange(4, dtype=np.float32).tobytes())
        self.regions.write(5, 0, b"read-only bytes")
        self.assertEqual(self.owner_read(0, 15), b"read-only bytes")
        self.assertEqual(_fake_mappings(), self.before + 1)
        self.regions.unmap(5)
        self.assertEqual(self.regions.mapped(), ([], []))
        self.assertEqual(_fake_mappings(), self.before)

    def test_bounds(self):
        cases = {
            "past the region": (0, _SIZE - 8, 16),
            "region larger than the allocation": (_SIZE * 2, _SIZE, 16),
        }
        for name, (region_size, offset, n) in cases.items():
            with self.subTest(name):
                self.regions.map(6, 0, region_size, self.handle, 0)
                self.addCleanup(self.regions.unmap, 6)
                with self.assertRaises(ValueError):
                    self.regions.read(6, offset if region_size else 0, n if region_size else 1)
        with self.assertRaises(ValueError):
            self.regions.read(99, 0, 1)

    def test_device_tensor(self):
        self.regions.map(7, 0, _SIZE, self.handle, 0)
        self.addCleanup(self.regions.unmap, 7)
        old, pb._cuda = pb._cuda, self.regions
        self.addCleanup(setattr, pb, "_cuda", old)
        t = pb._input_tensor("IN", 11, [2, 2], 4, (7, 64), 16)
        self.assertFalse(t.is_cpu())
        self.assertEqual(t.__dlpack_device__(), (2, 0))
        with self.assertRaises(pb.TritonModelException) as cm:
            t.as_numpy()
        self.assertEqual(str(cm.exception), "Tensor is stored in GPU and cannot be converted to NumPy.")
        capsule = t.to_dlpack()
        self.assertTrue(pb._capsule_is_valid(capsule, b"dltensor"))
        managed = pb._DLManagedTensor.from_address(pb._capsule_get_pointer(capsule, b"dltensor"))
        dl = managed.dl_tensor
        _, pointer = self.regions.place(7, 64, 16)
        self.assertEqual((dl.device.device_type, dl.device.device_id), (2, 0))
        self.assertEqual(dl.data, pointer)
        self.assertEqual([dl.shape[i] for i in range(dl.ndim)], [2, 2])
        self.assertEqual((dl.dtype.code, dl.dtype.bits), (2, 32))
        # A consumer reads the device memory through the driver.
        buf = ctypes.create_string_buffer(16)
        self.driver.to_host(0, ctypes.addressof(buf), dl.data, 16)
        self.assertEqual(buf.raw, bytes(i % 251 for i in range(64, 80)))
        # Unmapping while the capsule lives keeps the memory; dropping it closes.
        self.regions.unmap(7)
        self.assertEqual(_fake_mappings(), self.before + 1)
        del managed, dl, capsule
        gc.collect()
        self.assertEqual(_fake_mappings(), self.before)
        # The host copy a BLS request or an arena output uses.
        self.regions.map(8, 0, _SIZE, self.handle, 0)
        self.addCleanup(self.regions.unmap, 8)
        pb_view = self.regions.read(8, 64, 16)
        self.assertEqual(np.frombuffer(pb_view, np.uint8).tolist(), [i % 251 for i in range(64, 80)])

    def test_gpu_tensor_from_dlpack(self):
        # A model's GPU tensor (what torch.utils.dlpack.to_dlpack gives) is
        # copied to host memory through the stub's driver.
        self.regions.map(9, 0, _SIZE, self.handle, 0)
        self.addCleanup(self.regions.unmap, 9)
        _, pointer = self.regions.place(9, 128, 16)
        old, cuda._driver = cuda._driver, self.driver
        self.addCleanup(setattr, cuda, "_driver", old)
        capsule = pb._dl_export_raw(pointer, [2, 2], 11, pb._kDLCUDA, 0, None)
        t = pb.Tensor.from_dlpack("OUT", capsule)
        self.assertTrue(t.is_cpu())
        want = np.frombuffer(bytes(i % 251 for i in range(128, 144)), np.float32).reshape(2, 2)
        np.testing.assert_array_equal(t.as_numpy(), want)
        self.assertFalse(pb._capsule_is_valid(capsule, b"dltensor"))  # consumed

    def test_gpu_tensor_without_driver(self):
        old_driver, cuda._driver = cuda._driver, None
        self.addCleanup(setattr, cuda, "_driver", old_driver)
        old_env = os.environ.get(cuda.ENV_LIBRARY)
        os.environ[cuda.ENV_LIBRARY] = "/nonexistent/libcuda.so.1"
        self.addCleanup(lambda: os.environ.pop(cuda.ENV_LIBRARY) if old_env is None
                        else os.environ.__setitem__(cuda.ENV_LIBRARY, old_env))
        capsule = pb._dl_export_raw(0x1000, [4], 11, pb._kDLCUDA, 0, None)
        with self.assertRaises(pb.TritonModelException) as cm:
            pb.Tensor.from_dlpack("OUT", capsule)
        self.assertIn("when GPU is not available", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
