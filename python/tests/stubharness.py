"""A supervisor played by the test: a real region (stubvisor.ipc's
supervisor side), a real stub process (python -m stubvisor), and helpers to
speak the protocol of ipc/messages.go to it."""

import json
import os
import subprocess
import sys
import time

import numpy as np

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(PYTHON_DIR)
MODELS = os.path.join(REPO, "testdata", "models")
TEST_MODELS = os.path.join(PYTHON_DIR, "testdata", "models")

if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)

from stubvisor import ipc  # noqa: E402

K = ipc
WAIT = 10.0  # the bound of every wait in these tests

NP = {1: np.bool_, 2: np.uint8, 3: np.uint16, 4: np.uint32, 5: np.uint64, 6: np.int8, 7: np.int16,
      8: np.int32, 9: np.int64, 10: np.float16, 11: np.float32, 12: np.float64, 14: np.uint16}


def serialize_bytes(items):
    return b"".join(len(b).to_bytes(4, "little") + b for b in items)


def deserialize_bytes(buf):
    out, i = [], 0
    while i < len(buf):
        n = int.from_bytes(buf[i:i + 4], "little")
        out.append(bytes(buf[i + 4:i + 4 + n]))
        i += 4 + n
    return out


def _to_fd3(fd):
    if fd == 3:
        os.set_inheritable(3, True)
    else:
        os.dup2(fd, 3)  # the copy is inheritable


class Stub:
    """One stub process on its own region."""

    def __init__(self, instance, ring_bytes=1 << 16, arena_max=1 << 26):
        self.instance = instance
        self.sup = ipc.Channel._create(ring_bytes=ring_bytes, arena_max=arena_max,
                                       arena_default=1 << 20, arena_growth=1 << 20)
        fd = self.sup.fd
        # Entries already on PYTHONPATH stay after the stub's own (the run
        # that hides msgpack puts its blocker there).
        path = os.pathsep.join(p for p in (PYTHON_DIR, os.environ.get("PYTHONPATH", "")) if p)
        env = dict(os.environ, PYTHONPATH=path, STUBVISOR_INSTANCE=instance)
        # The region goes to fd 3 of the child, as the supervisor's ExtraFiles
        # put it. close_fds would run after preexec_fn and close it again, so
        # it stays off: every other fd of this process is close-on-exec.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "stubvisor"], close_fds=False, preexec_fn=lambda: _to_fd3(fd),
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.logs = []
        self.next_id = 100
        self.hello = self.expect(K.KIND_HELLO)

    # --- plumbing -------------------------------------------------------------

    def close(self):
        """Kill the stub if it still runs and release the region."""
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(WAIT)
        finally:
            self.proc.stdout.close()
            self.proc.stderr.close()
            self.sup.close()

    def recv(self, timeout=WAIT):
        msg = self.sup.recv(timeout)
        if msg is None:
            raise AssertionError("no message from the stub within %.1f s (exit status %r, stderr %r)"
                                 % (timeout, self.proc.poll(), self._stderr()))
        return msg

    def _stderr(self):
        if self.proc.poll() is None:
            return "(still running)"
        return self.proc.stderr.read().decode(errors="replace")

    def expect(self, kind, timeout=WAIT):
        """The next message of this kind; Log messages on the way are kept
        in self.logs, anything else fails."""
        deadline = time.monotonic() + timeout
        while True:
            msg = self.recv(max(deadline - time.monotonic(), 0.001))
            if msg[0] == kind:
                return msg
            if msg[0] == K.KIND_LOG:
                self.logs.append(msg)
                continue
            raise AssertionError("expected kind %d, got %r" % (kind, msg))

    def new_id(self):
        self.next_id += 1
        return self.next_id

    def put(self, data):
        """Copy bytes into arena 0; returns (loc, offset, size)."""
        if not data:
            return ipc.LOC_NONE, 0, 0
        off = self.sup.alloc(len(data))
        self.sup.view(ipc.LOC_ARENA0, off, len(data))[:] = data
        return ipc.LOC_ARENA0, off, len(data)

    def tensor(self, name, dtype, array, inline=False):
        """A wire tensor descriptor for a numpy array (or list of bytes for
        BYTES, dtype 13), its bytes placed in arena 0, or with inline (as
        the supervisor sends inputs of at most INLINE_MAX bytes) in the
        message."""
        if dtype == 13:
            data = serialize_bytes(array)
            shape = [len(array)]
        else:
            array = np.ascontiguousarray(array, dtype=NP[dtype])
            data = array.tobytes()
            shape = list(array.shape)
        if inline and data:
            return [name, dtype, shape, ipc.LOC_INLINE, 0, len(data), data]
        loc, off, size = self.put(data)
        return [name, dtype, shape, loc, off, size]

    def read(self, t):
        """The value of a wire tensor the stub sent: numpy array, or a list
        of bytes for BYTES."""
        name, dtype, shape, loc, off, size = t[:6]
        if loc == ipc.LOC_INLINE:
            buf = t[6]
        else:
            buf = bytes(self.sup.view(loc, off, size)) if size else b""
        if dtype == 13:
            return deserialize_bytes(buf)
        return np.frombuffer(buf, NP[dtype]).reshape(shape)

    # --- commands ---------------------------------------------------------------

    def initialize(self, model_dir, config=None, decoupled=False, model_file=None):
        name = os.path.basename(model_dir)
        config = dict(config or {})
        config.setdefault("name", name)
        args = {
            "model_config": json.dumps(config),
            "model_instance_kind": "CPU",
            "model_instance_name": self.instance,
            "model_instance_device_id": "0",
            "model_repository": model_dir,
            "model_version": "1",
            "model_name": name,
        }
        msg_id = self.new_id()
        self.sup.send([K.KIND_INITIALIZE, msg_id, args, {
            "model_file": model_file or os.path.join(model_dir, "1", "model.py"),
            "decoupled": decoupled, "force_cpu_only_input_tensors": True}])
        reply = self.expect(K.KIND_RESULT)
        assert reply[1] == msg_id, reply
        return reply

    def request(self, handle, inputs, requested=(), params=None, correlation_id=0, request_id="", flags=0):
        return [handle, request_id, correlation_id, flags, inputs, list(requested),
                json.dumps(params) if params else "", 0]

    def execute(self, requests, batch_id=None):
        batch_id = batch_id if batch_id is not None else self.new_id()
        self.sup.send([K.KIND_EXECUTE, batch_id, requests])
        return batch_id

    def release(self, response):
        offsets = [t[4] for t in response[3] if t[5] and t[3] == ipc.LOC_ARENA1]
        if offsets:
            self.sup.send([K.KIND_RELEASE, 0, offsets])

    def stub_in_use(self):
        return self.sup.usage()[1]["in_use"]

    def wait_stub_in_use(self, value):
        deadline = time.monotonic() + WAIT
        while self.stub_in_use() != value:
            if time.monotonic() > deadline:
                raise AssertionError("stub arena in use %d, want %d" % (self.stub_in_use(), value))
            time.sleep(0.005)

    def finalize(self):
        msg_id = self.new_id()
        self.sup.send([K.KIND_FINALIZE, msg_id])
        reply = self.expect(K.KIND_RESULT)
        assert reply[1] == msg_id
        return self.proc.wait(WAIT)


ADD_SUB_CONFIG = {
    "name": "add_sub",
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
              {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]},
               {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [4]}],
}

REPEAT_CONFIG = {
    "name": "repeat_decoupled",
    "model_transaction_policy": {"decoupled": True},
    "input": [{"name": "IN", "data_type": "TYPE_INT32", "dims": [-1]},
              {"name": "DELAY", "data_type": "TYPE_UINT32", "dims": [-1]},
              {"name": "WAIT", "data_type": "TYPE_UINT32", "dims": [1]}],
    "output": [{"name": "OUT", "data_type": "TYPE_INT32", "dims": [1]},
               {"name": "IDX", "data_type": "TYPE_UINT32", "dims": [1]}],
}


def add_sub_host(test):
    """An in-process region: the supervisor's Channel and a stub Host on
    its other side with add_sub initialized and pb_utils pointed at it,
    all undone by test's cleanups. Returns (supervisor channel, host)."""
    import triton_python_backend_utils as pb
    from stubvisor import host as hostmod

    saved = pb._runtime, pb._view, pb._cuda
    test.addCleanup(lambda: setattr(pb, "_runtime", saved[0]) or setattr(pb, "_view", saved[1])
                    or setattr(pb, "_cuda", saved[2]))
    sup = ipc.Channel._create(ring_bytes=1 << 16, arena_max=1 << 24)
    test.addCleanup(sup.close)
    stub = ipc.Channel.attach(os.dup(sup.fd))
    test.addCleanup(stub.close)
    host = hostmod.Host(stub, "add_sub_0_0")
    pb._runtime, pb._view, pb._cuda = host, host._view, host._cuda
    repo = os.path.join(MODELS, "add_sub")
    config = {"name": "add_sub",
              "input": [{"name": n, "data_type": "TYPE_FP32", "dims": [16]} for n in ("INPUT0", "INPUT1")],
              "output": [{"name": n, "data_type": "TYPE_FP32", "dims": [16]} for n in ("OUTPUT0", "OUTPUT1")]}
    args = {"model_config": json.dumps(config), "model_instance_kind": "CPU",
            "model_instance_name": "add_sub_0_0", "model_instance_device_id": "0",
            "model_repository": repo, "model_version": "1", "model_name": "add_sub"}
    sup.send([ipc.KIND_INITIALIZE, 1, args, {"model_file": os.path.join(repo, "1", "model.py")}])
    host._on_initialize(host._next_command())
    result = sup.recv(WAIT)
    test.assertEqual(result[:3], [ipc.KIND_RESULT, 1, None])
    return sup, host
