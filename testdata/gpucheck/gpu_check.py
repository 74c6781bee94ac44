#!/usr/bin/env python3
"""The device check of stubvisor: run on a machine with an NVIDIA GPU and
Python (torch and cuda-python for every check), with no Go toolchain. It
starts the stubvisor binary next to it on the models next to it and prints
one line per check, "PASS|FAIL|SKIP <check>: <detail>"; it exits 1 if a
check failed. The whole run is bounded by --budget seconds (8 minutes).

Client-side CUDA memory comes from tritonclient.utils.cuda_shared_memory
when it is installed, otherwise from the CUDA driver API through ctypes
(libcuda.so.1, or --libcuda: the tests point it at the fake driver of
supervisor/cuda/testdata so the script itself is tested without a GPU).
"""

import argparse
import base64
import ctypes
import json
import mmap
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1 << 20


class Failed(Exception):
    pass


class Skipped(Exception):
    pass


# The system shared-memory regions the checks create are named
# <prefix><pid>_<name> in /dev/shm; the project's own test of this script
# picks a prefix its leak checks know to be a client's.
SHM_PREFIX = os.environ.get("GPUCHECK_SHM_PREFIX", "gpucheck_")


# ---------------------------------------------------------------------------
# The server.


class Server:
    def __init__(self, binary, models, python, libcuda, workdir):
        env = dict(os.environ)
        if libcuda:
            env["STUBVISOR_LIBCUDA"] = libcuda
        self.log = []
        self.proc = subprocess.Popen(
            [binary, "--model-repository", models, "--model-control-mode", "explicit",
             "--address", "127.0.0.1", "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0",
             "--python", python, "--cache-dir", os.path.join(workdir, "cache"), "--exit-on-error=false",
             "--allow-client-shm=true"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        self.url = None
        found = threading.Event()

        def read():
            for line in self.proc.stderr:
                self.log.append(line)
                m = re.search(r"listening: service=HTTP address=(\S+)", line)
                if m:
                    self.url = "http://" + m.group(1)
                    found.set()
            found.set()

        threading.Thread(target=read, daemon=True).start()
        if not found.wait(60) or self.url is None:
            self.stop()
            raise Failed("stubvisor did not start:\n" + "".join(self.log[-20:]))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def call(self, method, path, body=None, timeout=120):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                raw = r.read()
                return r.status, json.loads(raw) if raw else {}
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw)
            except ValueError:
                return e.code, {"error": raw.decode(errors="replace")}

    def ok(self, method, path, body=None, timeout=120):
        code, out = self.call(method, path, body, timeout)
        if code != 200:
            raise Failed("%s %s: %d %s" % (method, path, code, out.get("error", out)))
        return out

    def load(self, model):
        """Loads model unless it is ready already."""
        if self.call("GET", "/v2/models/%s/ready" % model)[0] != 200:
            self.ok("POST", "/v2/repository/models/%s/load" % model, {}, timeout=300)

    def infer(self, model, inputs, outputs=None):
        body = {"inputs": inputs}
        if outputs:
            body["outputs"] = outputs
        return self.ok("POST", "/v2/models/%s/infer" % model, body)


def shm_input(name, region, nbytes, shape):
    return {"name": name, "datatype": "FP32", "shape": shape,
            "parameters": {"shared_memory_region": region, "shared_memory_byte_size": nbytes}}


def shm_output(name, region, nbytes):
    return {"name": name, "parameters": {"shared_memory_region": region, "shared_memory_byte_size": nbytes}}


def output(resp, name):
    for o in resp.get("outputs", []):
        if o["name"] == name:
            return o
    raise Failed("response has no %s: %s" % (name, resp))


# ---------------------------------------------------------------------------
# Client memory: CUDA regions and system regions.

class DriverRegion:
    """Device memory from the CUDA driver API (ctypes)."""

    lib = None

    @classmethod
    def init(cls, path):
        if cls.lib is None:
            lib = ctypes.CDLL(path)
            if lib.cuInit(0) != 0:
                raise Skipped("cuInit failed: no usable GPU")
            ctx = ctypes.c_void_p()
            if lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) != 0 or lib.cuCtxSetCurrent(ctx) != 0:
                raise Skipped("no CUDA device 0")
            cls.lib = lib

    def __init__(self, size):
        self.size = size
        self.ptr = ctypes.c_uint64()
        if self.lib.cuMemAlloc_v2(ctypes.byref(self.ptr), ctypes.c_size_t(size)) != 0:
            raise Failed("cuMemAlloc of %d bytes failed" % size)

    def handle(self):
        h = (ctypes.c_char * 64)()
        if self.lib.cuIpcGetMemHandle(h, self.ptr) != 0:
            raise Failed("cuIpcGetMemHandle failed")
        return bytes(h)

    def write(self, array):
        if self.lib.cuMemcpyHtoD_v2(self.ptr, array.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(array.nbytes)) != 0:
            raise Failed("cuMemcpyHtoD failed")

    def read(self, dtype, count):
        out = np.empty(count, dtype=dtype)
        if self.lib.cuMemcpyDtoH_v2(out.ctypes.data_as(ctypes.c_void_p), self.ptr, ctypes.c_size_t(out.nbytes)) != 0:
            raise Failed("cuMemcpyDtoH failed")
        return out

    def close(self):
        self.lib.cuMemFree_v2(self.ptr)


class TritonClientRegion:
    """Device memory from tritonclient.utils.cuda_shared_memory."""

    def __init__(self, size, name):
        import tritonclient.utils.cuda_shared_memory as cudashm
        self.cudashm = cudashm
        self.size = size
        self.h = cudashm.create_shared_memory_region(name, size, 0)

    def handle(self):
        return base64.b64decode(self.cudashm.get_raw_handle(self.h))

    def write(self, array):
        self.cudashm.set_shared_memory_region(self.h, [array])

    def read(self, dtype, count):
        return self.cudashm.get_contents_as_numpy(self.h, dtype, [count])

    def close(self):
        self.cudashm.destroy_shared_memory_region(self.h)


class Regions:
    """Registers client regions with the server and frees them at the end."""

    def __init__(self, server, libcuda):
        self.server = server
        self.libcuda = libcuda or "libcuda.so.1"
        self.made = []
        self.tritonclient = False
        if not libcuda:
            try:
                import tritonclient.utils.cuda_shared_memory  # noqa: F401
                self.tritonclient = True
            except Exception:
                pass

    def cuda(self, name, size):
        if self.tritonclient:
            r = TritonClientRegion(size, name)
        else:
            try:
                DriverRegion.init(self.libcuda)
            except OSError as e:
                raise Skipped("no CUDA driver: %s" % e)
            r = DriverRegion(size)
        self.made.append(("cuda", name, r))
        self.server.ok("POST", "/v2/cudasharedmemory/region/%s/register" % name, {
            "raw_handle": {"b64": base64.b64encode(r.handle()).decode()}, "device_id": 0, "byte_size": size})
        return r

    def system(self, name, size):
        key = "/%s%d_%s" % (SHM_PREFIX, os.getpid(), name)
        fd = os.open("/dev/shm" + key, os.O_CREAT | os.O_RDWR | os.O_EXCL, 0o600)
        os.ftruncate(fd, size)
        mm = mmap.mmap(fd, size)
        os.close(fd)
        self.made.append(("system", name, (key, mm)))
        self.server.ok("POST", "/v2/systemsharedmemory/region/%s/register" % name,
                       {"key": key, "offset": 0, "byte_size": size})
        return mm

    def close(self):
        for kind, name, r in reversed(self.made):
            self.server.call("POST", "/v2/%ssharedmemory/region/%s/unregister" % (kind, name), {})
            if kind == "cuda":
                r.close()
            else:
                key, mm = r
                mm.close()
                os.unlink("/dev/shm" + key)
        self.made = []

    @property
    def how(self):
        return "tritonclient.utils.cuda_shared_memory" if self.tritonclient else "CUDA driver API (%s)" % self.libcuda


# ---------------------------------------------------------------------------
# The checks.

def have_torch_cuda(python):
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)"
    return subprocess.run([python, "-c", probe], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          timeout=120).returncode == 0


def check_cuda_shm(ctx):
    s, regs = ctx.server, ctx.regions
    s.load("gc_identity")
    n = 1024
    x = np.arange(n, dtype=np.float32)
    rin, rout = regs.cuda("rt_in", x.nbytes), regs.cuda("rt_out", x.nbytes)
    rin.write(x)
    for i in range(3):
        resp = s.infer("gc_identity", [shm_input("INPUT0", "rt_in", x.nbytes, [n])],
                       [shm_output("OUTPUT0", "rt_out", x.nbytes), {"name": "ON_GPU"}])
        got = rout.read(np.float32, n)
        if not np.array_equal(got, x):
            raise Failed("round trip %d: the output region holds other values" % i)
    regs.close()
    return "3 round trips of %d floats through %s" % (n, regs.how)


def check_force_cpu_no(ctx):
    s, regs = ctx.server, ctx.regions
    s.load("gc_identity")
    x = np.linspace(0, 1, 256, dtype=np.float32)
    r = regs.cuda("fc_in", x.nbytes)
    r.write(x)
    resp = s.infer("gc_identity", [shm_input("INPUT0", "fc_in", x.nbytes, [256])])
    on_gpu = output(resp, "ON_GPU")["data"][0]
    body = s.infer("gc_identity", [{"name": "INPUT0", "datatype": "FP32", "shape": [2], "data": [1, 2]}])
    on_cpu = output(body, "ON_GPU")["data"][0]
    if not np.allclose(output(resp, "OUTPUT0")["data"], x):
        raise Failed("the GPU input came back changed")
    regs.close()
    if on_gpu != 1 or on_cpu != 0:
        raise Failed("input from a CUDA region on GPU: %s, from the body: %s" % (on_gpu, on_cpu))
    return "a CUDA-region input reached execute on the GPU, a body input on the CPU"


def check_torch_dlpack(ctx):
    if not ctx.torch:
        raise Skipped("torch with CUDA is not importable by %s" % ctx.python)
    s = ctx.server
    s.load("gc_torch_out")
    resp = s.infer("gc_torch_out", [{"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]}])
    got = output(resp, "OUTPUT0")["data"]
    if got != [2, 4, 6, 8]:
        raise Failed("OUTPUT0 = %s, want [2, 4, 6, 8]" % got)
    return "torch CUDA tensor returned through DLPack: %s" % got


def check_bls_gpu(ctx):
    s, regs = ctx.server, ctx.regions
    s.load("gc_identity")
    s.load("gc_bls")
    x = np.arange(64, dtype=np.float32)
    r = regs.cuda("bls_in", x.nbytes)
    r.write(x)
    resp = s.infer("gc_bls", [shm_input("INPUT0", "bls_in", x.nbytes, [64])])
    regs.close()
    if not np.allclose(output(resp, "OUTPUT0")["data"], x):
        raise Failed("BLS with the GPU input answered other values")
    torch_leg = output(resp, "TORCH")["data"][0]
    return "BLS of a GPU input tensor" + (" and of a torch CUDA tensor" if torch_leg else " (no torch: torch leg not run)")


def check_two_instances(ctx):
    s = ctx.server
    s.load("gc_two")
    seen = set()
    lock = threading.Lock()
    errors = []

    def worker():
        for _ in range(20):
            try:
                resp = s.infer("gc_two", [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [0]}])
                with lock:
                    seen.add(output(resp, "WHO")["data"][0])
            except Exception as e:
                errors.append(e)
                return

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if errors:
        raise Failed(str(errors[0]))
    names = sorted(seen)
    if len(names) != 2 or any(w.split()[1:] != ["0", "0"] for w in names):
        raise Failed("instances answering: %s; want two, both on device 0 with CUDA_VISIBLE_DEVICES=0" % names)
    stubs = s.ok("GET", "/v2/models/gc_two/stubs")[0]["stubs"]
    live = [st for st in stubs if st["pid"] > 0]
    if len(live) != 2:
        raise Failed("%d live stubs, want 2" % len(live))
    return "both KIND_GPU instances served on device 0: %s" % "; ".join(names)


def check_latency(ctx):
    s, regs = ctx.server, ctx.regions
    s.load("gc_identity")
    size = 64 * MIB
    n = size // 4
    x = np.random.default_rng(1).random(n, dtype=np.float32)
    cin, cout = regs.cuda("lat_cin", size), regs.cuda("lat_cout", size)
    cin.write(x)
    sin, sout = regs.system("lat_sin", size), regs.system("lat_sout", size)
    sin[:] = x.tobytes()

    def timed(region_in, region_out):
        times = []
        for i in range(12):
            start = time.perf_counter()
            s.infer("gc_identity", [shm_input("INPUT0", region_in, size, [n])],
                    [shm_output("OUTPUT0", region_out, size), {"name": "ON_GPU"}])
            if i >= 2:
                times.append((time.perf_counter() - start) * 1000)
        return statistics.median(times)

    cuda_ms = timed("lat_cin", "lat_cout")
    if not np.array_equal(cout.read(np.float32, n)[[0, n // 2, n - 1]], x[[0, n // 2, n - 1]]):
        raise Failed("the CUDA output region holds other values")
    sys_ms = timed("lat_sin", "lat_sout")
    if np.frombuffer(sout, dtype=np.float32, count=n)[n - 1] != x[n - 1]:
        raise Failed("the system output region holds other values")
    regs.close()
    return "64 MiB identity, median of 10: CUDA shm %.1f ms, system shm %.1f ms (CUDA/system %.2f)" % (
        cuda_ms, sys_ms, cuda_ms / sys_ms)


CHECKS = [
    ("cuda-shm-roundtrip", check_cuda_shm),
    ("force-cpu-only-input-tensors-no", check_force_cpu_no),
    ("torch-cuda-dlpack-output", check_torch_dlpack),
    ("bls-gpu-tensors", check_bls_gpu),
    ("two-kind-gpu-instances", check_two_instances),
    ("latency-64mib-cuda-vs-system-shm", check_latency),
]


class Context:
    pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(HERE, "stubvisor"))
    ap.add_argument("--models", default=os.path.join(HERE, "models"))
    ap.add_argument("--python", default=sys.executable, help="the interpreter of the stubs")
    ap.add_argument("--libcuda", default="", help="a CUDA driver library other than libcuda.so.1 (tests: the fake one)")
    ap.add_argument("--budget", type=float, default=480, help="seconds for the whole run")
    ap.add_argument("--only", default="", help="comma-separated checks to run")
    args = ap.parse_args()
    deadline = time.monotonic() + args.budget
    only = set(filter(None, args.only.split(",")))
    failed = False
    with tempfile.TemporaryDirectory(prefix="gpucheck-") as work:
        ctx = Context()
        ctx.python = args.python
        ctx.torch = have_torch_cuda(args.python)
        try:
            ctx.server = Server(args.bin, args.models, args.python, args.libcuda, work)
        except Failed as e:
            print("FAIL start: %s" % e, flush=True)
            return 1
        try:
            for name, fn in CHECKS:
                if only and name not in only:
                    continue
                if time.monotonic() > deadline:
                    print("FAIL %s: out of time (budget %ds)" % (name, args.budget), flush=True)
                    failed = True
                    continue
                ctx.regions = Regions(ctx.server, args.libcuda)
                start = time.monotonic()
                try:
                    detail = fn(ctx)
                    print("PASS %s: %s (%.1fs)" % (name, detail, time.monotonic() - start), flush=True)
                except Skipped as e:
                    print("SKIP %s: %s" % (name, e), flush=True)
                except Exception as e:
                    failed = True
                    print("FAIL %s: %s: %s" % (name, type(e).__name__, e), flush=True)
                finally:
                    try:
                        ctx.regions.close()
                    except Exception:
                        pass
        finally:
            ctx.server.stop()
        if failed:
            sys.stderr.write("server log (last 40 lines):\n" + "".join(ctx.server.log[-40:]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
