"""The compiled fast path (stubvisor/fastpath.c) against the pure-Python
path it stands in for: the same Execute messages, run through a Host on a
real region once with each, must give the model the same requests and the
supervisor the same ExecuteDone, for a table of types, shapes and places.
Without the compiled module (STUBVISOR_PY_FASTPATH=0, another interpreter)
the comparisons skip and the rest of the suite covers the Python path."""

import contextlib
import json
import os
import resource
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import triton_python_backend_utils as pb  # noqa: E402
from stubvisor import execute as execmod  # noqa: E402
from stubvisor import ipc, native  # noqa: E402

from .stubharness import WAIT, add_sub_host  # noqa: E402

FAST = native.FAST
needs_fast = unittest.skipIf(FAST is None, "compiled fast path not loaded: " + native.REASON)

FIXED = [(code, dt) for code, dt in sorted(pb._WIRE_DTYPE.items())]


def _values(dt, n):
    if dt.kind == "b":
        return (np.arange(n) % 2).astype(dt)
    return (np.arange(n) * 3 + 1).astype(dt)


class Region:
    """The supervisor's side of a region and a Host on its stub side, with
    add_sub loaded and its execute swapped for the test's."""

    def __init__(self, test):
        self.sup, self.host = add_sub_host(test)
        self.seen = []
        self.host.model.execute = self.echo

    def echo(self, requests):
        """Record each request and answer with its inputs renamed OUT_*
        (and parameters when the request asks for them)."""
        self.seen.append(requests)
        out = []
        for r in requests:
            tensors = [pb.Tensor("OUT_" + t.name(), t.as_numpy()) for t in r.inputs()
                       if t._src is None or t._src[0] != ipc.LOC_CLIENT]
            params = json.loads(r.parameters())
            if params.get("error"):
                out.append(pb.InferenceResponse(error=pb.TritonError(params["error"])))
            elif params.get("reply_parameters"):
                out.append(pb.InferenceResponse(tensors, parameters={"echo": 1}))
            else:
                out.append(pb.InferenceResponse(tensors))
        return out

    def arena_input(self, name, code, shape, data):
        off = self.sup.alloc(len(data))
        self.sup.view(ipc.LOC_ARENA0, off, len(data))[:] = data
        return [name, code, list(shape), ipc.LOC_ARENA0, off, len(data)]

    def run(self, requests, batch_id=9):
        self.seen.clear()
        self.sup.send([ipc.KIND_EXECUTE, batch_id, requests])
        try:
            self.host._on_execute(self.host._next_command())
        except Exception as exc:  # the host's loop logs it (Host.serve)
            return ("raised", type(exc).__name__, str(exc)), []
        done = self.sup.recv(WAIT)
        while done[0] == ipc.KIND_LOG:  # a failed batch logs its error first
            done = self.sup.recv(WAIT)
        # Outputs in the stub's arena: their bytes, not their offsets
        # (each run allocates its own block).
        for resp in done[3]:
            for t in resp[3]:
                if t[3] == ipc.LOC_ARENA1 and t[5]:
                    t[4] = bytes(self.sup.view(ipc.LOC_ARENA1, t[4], t[5]))
        return done, [self.describe(r) for r in self.seen[0]] if self.seen else []

    @staticmethod
    def describe(r):
        slots = {s: getattr(r, s) for s in pb.InferenceRequest.__slots__ if s not in ("__weakref__", "_inputs")}
        trace = slots.pop("_trace")
        slots["trace"] = (trace is pb._DEFAULT_TRACE, trace.get_context())
        inputs = []
        for t in r._inputs:
            arr = t._np
            inputs.append((type(t), t._name, t._dtype, t._shape, t._src if arr is None else None,
                           None if arr is None else (arr.dtype.str, arr.shape, arr.tolist())))
        return slots, inputs


def inline(name, code, shape, data):
    return [name, code, list(shape), ipc.LOC_INLINE, 0, len(data), data]


def request(handle, inputs, requested=(), params="", extra=()):
    return [handle, "id%d" % handle, handle * 7, 0, inputs, list(requested), params, 1000 * handle] + list(extra)


def cases(region):
    """name -> the requests of one Execute."""
    table = {}
    for code, dt in FIXED:
        for shape in ([16], [2, 3], [1]):
            n = int(np.prod(shape))
            data = _values(dt, n).astype(dt).tobytes()
            table["inline %s %s" % (code, shape)] = [request(1, [inline("IN", code, shape, data)])]
    f32 = (np.arange(16, dtype="<f4") + 0.5).tobytes()
    big = (np.arange(2048, dtype="<f4")).tobytes()
    strings = pb.serialize_byte_tensor(np.array([b"s-%02d" % i for i in range(5)], dtype=np.object_))
    table.update({
        "add_sub pair": [request(1, [inline("INPUT0", 11, [16], f32), inline("INPUT1", 11, [16], f32)])],
        "batch of three": [request(i, [inline("A", 11, [16], f32)]) for i in range(1, 4)],
        "empty tensor": [request(1, [["E", 11, [0], ipc.LOC_NONE, 0, 0]])],
        "empty and full": [request(1, [["E", 8, [0, 4], ipc.LOC_NONE, 0, 0], inline("F", 11, [16], f32)])],
        "bytes inline": [request(1, [inline("S", 13, [5], strings)])],
        "bytes arena": [request(1, [region.arena_input("S", 13, [5], strings)])],
        "arena input": [request(1, [region.arena_input("BIG", 11, [2048], big)])],
        "arena and inline": [request(1, [region.arena_input("BIG", 11, [2048], big), inline("A", 11, [16], f32)])],
        "client region input": [request(1, [["C", 11, [16], ipc.LOC_CLIENT, 128, 64, 7]])],
        "requested outputs": [request(1, [inline("A", 11, [16], f32), inline("B", 11, [16], f32)], ["OUT_B"])],
        "parameters": [request(1, [inline("A", 11, [16], f32)], params='{"p": "v", "n": 3}')],
        "response parameters": [request(1, [inline("A", 11, [16], f32)], params='{"reply_parameters": true}')],
        "error response": [request(1, [inline("A", 11, [16], f32)], params='{"error": "no"}')],
        "large handle": [request(1 << 40, [inline("A", 11, [16], f32)])],
        "trace context": [request(1, [inline("A", 11, [16], f32)], extra=([], "ctx"))],
        "no inputs": [request(1, [])],
        "no requests": [],
    })
    return table


class FastPathMatchesPythonTest(unittest.TestCase):
    def setUp(self):
        self.region = Region(self)

    def both(self, requests):
        """(fast, python): what each path gives for the same message."""
        fast = self.region.run(requests)
        saved = execmod._fast_requests, execmod._fast_done, self.region.host.ch._fast_in, self.region.host.ch._fast_out
        execmod._fast_requests = execmod._fast_done = None
        self.region.host.ch._fast_in = self.region.host.ch._fast_out = None
        try:
            with python_pb():
                python = self.region.run(requests)
        finally:
            (execmod._fast_requests, execmod._fast_done, self.region.host.ch._fast_in,
             self.region.host.ch._fast_out) = saved
        return fast, python

    @needs_fast
    def test_table(self):
        for name, requests in cases(self.region).items():
            with self.subTest(case=name):
                (fast_done, fast_reqs), (py_done, py_reqs) = self.both(requests)
                self.assertEqual(fast_done, py_done)
                self.assertEqual(len(fast_reqs), len(requests))
                for got, want in zip(fast_reqs, py_reqs):
                    self.assertEqual(got[0], want[0])  # every slot
                    self.assertEqual(got[1], want[1])  # every input
                # BF16 has no numpy type: the echo's as_numpy fails the batch.
                if name != "error response" and not name.startswith("inline %d " % pb._BF16):
                    self.assertIsNone(fast_done[2], fast_done)

    @needs_fast
    def test_malformed_requests_fail_as_in_python(self):
        bad = {
            "short request": [[1, "x", 0, 0, []]],
            "tensor of three": [request(1, [["A", 11, [16]]])],
            "inline without bytes": [request(1, [["A", 11, [16], ipc.LOC_INLINE, 0, 64, None]])],
            "loc not an int": [request(1, [["A", 11, [16], "inline", 0, 64, b""]])],
            "inputs not a list": [request(1, 7)],
            "request not a list": [5],
        }
        for name, requests in bad.items():
            with self.subTest(case=name):
                (fast_done, _), (py_done, _) = self.both(requests)
                self.assertEqual(fast_done, py_done)
                self.assertEqual(fast_done[0], "raised")  # as in Python: Host.serve logs it

    @needs_fast
    def test_usual_done_declines_what_it_does_not_encode(self):
        host = self.region.host
        requests = FAST.requests([request(1, [])], host, "m", "1")
        f32 = np.arange(4, dtype=np.float32)
        declined = {
            "not a response": [None],
            "error": [pb.InferenceResponse(error=pb.TritonError("x"))],
            "parameters": [pb.InferenceResponse([], parameters={"a": 1})],
            "bytes, no elements": [pb.InferenceResponse([pb.Tensor("S", np.array([], dtype=np.object_))])],
            "bytes, an int element": [pb.InferenceResponse([pb.Tensor("S", np.array([b"a", 1], dtype=np.object_))])],
            "bytes over inline": [pb.InferenceResponse([pb.Tensor("S", np.array([b"x" * 1021], dtype=np.object_))])],
            "over inline": [pb.InferenceResponse([pb.Tensor("B", np.zeros(1024, np.float32))])],
            "scalar": [pb.InferenceResponse([pb.Tensor("Z", np.float32(1.0) * np.ones((), np.float32))])],
            "count": [pb.InferenceResponse([pb.Tensor("A", f32)])] * 2,
        }
        for name, returned in declined.items():
            with self.subTest(case=name):
                self.assertIsNone(FAST.usual_done(3, requests, returned, 1 << 20))
        self.assertIsNone(FAST.usual_done(-1, requests, [pb.InferenceResponse([])], 1 << 20))
        self.assertIsNone(FAST.usual_done(3, requests, [pb.InferenceResponse([pb.Tensor("A", f32)])], 8))
        frame = FAST.usual_done(3, requests, [pb.InferenceResponse([pb.Tensor("A", f32)])], 1 << 20)
        self.assertEqual(ipc.msgpack.unpackb(frame, raw=False),
                         [ipc.KIND_EXECUTE_DONE, 3, None, [[1, ipc.FLAG_FINAL, None,
                                                            [["A", 11, [4], ipc.LOC_INLINE, 0, 16, f32.tobytes()]], ""]]])
        # BYTES: the elements serialized, up to INLINE_MAX bytes in all.
        text = np.array([b"a", "\u00e9", np.bytes_(b"")], dtype=np.object_)
        frame = FAST.usual_done(3, requests, [pb.InferenceResponse([pb.Tensor("S", text)])], 1 << 20)
        wire = b"\x01\x00\x00\x00a\x02\x00\x00\x00\xc3\xa9\x00\x00\x00\x00"
        self.assertEqual(ipc.msgpack.unpackb(frame, raw=False),
                         [ipc.KIND_EXECUTE_DONE, 3, None, [[1, ipc.FLAG_FINAL, None,
                                                            [["S", 13, [3], ipc.LOC_INLINE, 0, 15, wire]], ""]]])
        fits = np.array([b"x" * 1020], dtype=np.object_)  # 1024 bytes serialized
        self.assertIsNotNone(FAST.usual_done(3, requests, [pb.InferenceResponse([pb.Tensor("S", fits)])], 1 << 20))
        self.assertIsNone(FAST.usual_done(3, requests, [pb.InferenceResponse([pb.Tensor("S", fits)])], 1023))

    @needs_fast
    def test_split_bytes_errors_match(self):
        good = pb.serialize_byte_tensor(np.array([b"", b"a", b"bc" * 300], dtype=np.object_))
        for data in (good, b"", good[:3], good[:-1], b"\x05\x00\x00\x00ab", bytearray(good), memoryview(good)):
            with self.subTest(data=bytes(data)[:12]):
                try:
                    want = ("ok", pb._object_array(_python_split(data)).tolist())
                except ValueError as exc:
                    want = ("error", str(exc))
                try:
                    got = ("ok", pb.deserialize_bytes_tensor(data).tolist())
                except ValueError as exc:
                    got = ("error", str(exc))
                self.assertEqual(got, want)

    @needs_fast
    def test_ring_falls_back_for_wrapped_and_bad_frames(self):
        # Frames that wrap the ring take the Python path on both sides
        # and come out whole; a frame the unpacker refuses raises
        # ProtocolError as without the fast path.
        sup, stub = self.region.sup, self.region.host.ch
        payload = b"x" * 5000
        for i in range(40):
            sup.send([ipc.KIND_CANCEL, i, payload])
            self.assertEqual(stub.recv(WAIT), [ipc.KIND_CANCEL, i, payload])
            stub.send_frame(ipc.msgpack.packb([ipc.KIND_LOG, i, payload], use_bin_type=True))
            self.assertEqual(sup.recv(WAIT), [ipc.KIND_LOG, i, payload])
        sup._push_slow(b"\xc1")  # never valid msgpack
        with self.assertRaises(ipc.ProtocolError):
            stub.recv(WAIT)
        sup.send([ipc.KIND_CANCEL, 1])
        self.assertEqual(stub.recv(WAIT), [ipc.KIND_CANCEL, 1])

    @needs_fast
    def test_closed_channel_refuses(self):
        stub = self.region.host.ch
        stub.close()
        self.assertFalse(stub._fast_out is None)
        with self.assertRaises(ipc.PeerDead):
            stub.send_frame(b"\x90")
        with self.assertRaises(ipc.PeerDead):
            stub.recv(0)

    @needs_fast
    def test_memory_flat_over_many_requests(self):
        # 100k requests through both C paths: a reference leaked per
        # request would grow RSS by megabytes.
        f32 = (np.arange(16, dtype="<f4") + 0.5).tobytes()
        requests = [request(1, [inline("INPUT0", 11, [16], f32), inline("INPUT1", 11, [16], f32)], params="{}")]
        data = ipc.msgpack.packb([ipc.KIND_EXECUTE, 9, requests], use_bin_type=True)
        host, sup = self.region.host, self.region.sup
        host.model.execute = lambda reqs: [pb.InferenceResponse([pb.Tensor("OUT", r._inputs[0].as_numpy())])
                                           for r in reqs]

        def loop(n):
            for _ in range(n):
                sup._push_slow(data)
                host._on_execute(host._next_command())
                sup.recv(WAIT)

        loop(20000)
        before = _rss_kib()
        loop(100000)
        grown = _rss_kib() - before
        self.assertLess(grown, 2048, "RSS grew by %d KiB over 100k requests" % grown)


class PbUtilsCallsTest(unittest.TestCase):
    """pb_utils' as_numpy and get_input_tensor_by_name, compiled, against
    the Python functions they stand in for (native.PY_*)."""

    @needs_fast
    def test_as_numpy_matches(self):
        f32 = (np.arange(6, dtype="<f4") + 0.5).tobytes()
        strings = pb.serialize_byte_tensor(np.array([b"a", b"bc"], dtype=np.object_))
        srcs = {
            "inline fp32": (11, (2, 3), (ipc.LOC_INLINE, f32, len(f32))),
            "inline int8": (6, [4], (ipc.LOC_INLINE, b"\x01\x02\x03\x04", 4)),
            "inline bytes": (13, [2], (ipc.LOC_INLINE, strings, len(strings))),
            "inline bytes 2-D": (13, [2, 1], (ipc.LOC_INLINE, strings, len(strings))),
            "inline bytes tuple shape": (13, (1, 2), (ipc.LOC_INLINE, strings, len(strings))),
            "inline bytes scalar": (13, [], (ipc.LOC_INLINE, strings[:5], 5)),
            "inline bytes, shape of floats": (13, [2.0], (ipc.LOC_INLINE, strings, len(strings))),
            "inline bytes, shape too large": (13, [3], (ipc.LOC_INLINE, strings, len(strings))),
            "inline bytes, negative shape": (13, [-1], (ipc.LOC_INLINE, strings, len(strings))),
            "inline bytes, huge shape": (13, [1 << 62, 1 << 62], (ipc.LOC_INLINE, strings, len(strings))),
            "inline bytes, empty elements": (13, [3], (ipc.LOC_INLINE, b"\0" * 12, 12)),
            "inline bytes, truncated prefix": (13, [1], (ipc.LOC_INLINE, strings[:7], 7)),
            "inline bytes, truncated element": (13, [2], (ipc.LOC_INLINE, strings[:-1], len(strings) - 1)),
            "inline bytes, not bytes": (13, [2], (ipc.LOC_INLINE, bytearray(strings), len(strings))),
            "inline empty": (11, [0], (ipc.LOC_INLINE, b"", 0)),
            "bf16": (14, [2], (ipc.LOC_INLINE, b"\x00\x01\x02\x03", 4)),
            "cuda": (11, [1], (ipc.LOC_CUDA, (1, 0), 4)),
            "wrong size": (11, [4], (ipc.LOC_INLINE, b"\x00" * 6, 6)),
            "unknown dtype": (99, [1], (ipc.LOC_INLINE, b"\x00", 1)),
        }
        for name, (code, shape, src) in srcs.items():
            with self.subTest(case=name):
                got, want = [], []
                for fn, out in ((pb.Tensor.as_numpy, got), (native.PY_AS_NUMPY, want)):
                    t = pb._new_tensor(pb.Tensor)
                    t._name, t._dtype, t._shape, t._np, t._src = "T", code, shape, None, src
                    with contextlib.nullcontext() if out is got else python_pb():
                        try:
                            a = fn(t)
                            out.append((a.dtype.str, a.shape, a.tolist(), a.flags.writeable, a is fn(t)))
                        except Exception as exc:
                            out.append((type(exc).__name__, str(exc)))
                self.assertEqual(got, want)
        out = pb.Tensor("O", np.arange(3, dtype=np.int32))
        self.assertIs(out.as_numpy(), out._np)

    @needs_fast
    def test_get_input_tensor_by_name_matches(self):
        r = FAST.requests([request(1, [inline("A", 11, [1], b"\0" * 4), inline("B", 11, [1], b"\0" * 4)])],
                          None, "m", "1")[0]
        bls = pb.InferenceRequest(model_name="m", inputs=[pb.Tensor("A", np.zeros(1, np.float32))],
                                  requested_output_names=[])

        class Other:
            def inputs(self):
                return r.inputs()

        for req in (r, bls, Other()):
            for name in ("A", "B", "C", "", 7):
                with self.subTest(request=type(req).__name__, name=name):
                    self.assertIs(pb.get_input_tensor_by_name(req, name), native.PY_GET_INPUT(req, name))
        with self.assertRaises(TypeError):
            pb.get_input_tensor_by_name(r)


class ConstructorsTest(unittest.TestCase):
    """pb_utils.Tensor and InferenceResponse built by the compiled __init__s
    and by the Python ones (native.PY_*_INIT) hold the same slots, or fail
    with the same exception."""

    @staticmethod
    def build(cls, init, args, kwargs):
        obj = cls.__new__(cls)
        try:
            init(obj, *args, **kwargs)
        except Exception as exc:
            return (type(exc).__name__, str(exc))
        return {s: getattr(obj, s, "<unset>") for s in cls.__slots__ if s != "__weakref__"}

    @needs_fast
    def test_tensor(self):
        f32 = np.arange(6, dtype=np.float32)
        calls = [("A", f32), ("A", f32.reshape(2, 3)), ("A", f32.reshape(2, 3).T), ("", f32), (7, f32),
                 ("A", None), ("A", [1, 2]), ("A", np.array([b"x"], dtype=np.object_)), ("A", f32.astype(">f4")),
                 ("A", np.array([1 + 2j])), ("A",), ("A", f32, 1)]
        for args in calls:
            with self.subTest(args=repr(args)[:60]):
                got = self.build(pb.Tensor, pb.Tensor.__init__, args, {})
                want = self.build(pb.Tensor, native.PY_TENSOR_INIT, args, {})
                if isinstance(got, dict):
                    for d in (got, want):
                        d["_np"] = (d["_np"].dtype.str, d["_np"].shape, d["_np"].tolist(), d["_np"].flags.c_contiguous)
                self.assertEqual(got, want)
        self.assertEqual(self.build(pb.Tensor, pb.Tensor.__init__, (), {"name": "K", "numpy_array": f32})["_name"], "K")

        class Sub(pb.Tensor):
            __slots__ = ()

        self.assertEqual(Sub("S", f32).name(), "S")

    @needs_fast
    def test_response(self):
        t = pb.Tensor("A", np.zeros(2, np.float32))
        calls = [(([t],), {}), (([],), {}), ((), {}), ((), {"output_tensors": [t]}), (([t, None],), {}),
                 (([t, 3],), {}), (((t,),), {}), ((None,), {}), (([t],), {"error": pb.TritonError("e")}),
                 (([t],), {"parameters": {"a": 1}}), ((), {"error": "e"}), (([t], None, None), {})]
        for args, kwargs in calls:
            with self.subTest(args=repr(args)[:60], kwargs=sorted(kwargs)):
                got = self.build(pb.InferenceResponse, pb.InferenceResponse.__init__, args, kwargs)
                want = self.build(pb.InferenceResponse, native.PY_RESPONSE_INIT, args, kwargs)
                self.assertEqual(got, want)


@contextlib.contextmanager
def python_pb():
    """pb_utils' as_numpy and BYTES functions without their compiled
    stand-ins (native.py), as the pure-Python path runs them."""
    saved = pb.Tensor.__dict__["as_numpy"], pb._serialize_fast, pb._bytes_array, pb._split_bytes
    pb.Tensor.as_numpy, pb._serialize_fast, pb._bytes_array, pb._split_bytes = native.PY_AS_NUMPY, None, None, None
    try:
        yield
    finally:
        pb.Tensor.as_numpy, pb._serialize_fast, pb._bytes_array, pb._split_bytes = saved


def _python_split(data):
    saved = pb._split_bytes
    pb._split_bytes = None
    try:
        return list(pb.deserialize_bytes_tensor(data))
    finally:
        pb._split_bytes = saved


def _rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() // 1024


class LoadTest(unittest.TestCase):
    def test_reason(self):
        if os.environ.get(native.ENV) == "0":
            self.assertIsNone(FAST)
            self.assertIn(native.ENV + "=0", native.REASON)
        elif FAST is not None:
            self.assertEqual(FAST.ABI, native._ABI)
            self.assertIs(ipc.FAST_RING, FAST.Ring)
            self.assertIn("loaded", native.REASON)

    def test_python_path_without_module(self):
        # A Python that cannot import the module (another interpreter,
        # a plain go build) runs the pure path: native says why.
        import subprocess
        code = ("import sys; sys.modules['stubvisor.fastpath'] = None; "
                "from stubvisor import native, ipc; print(native.FAST is None, ipc.FAST_RING is None, native.REASON)")
        out = subprocess.run([sys.executable, "-c", code], cwd=os.path.dirname(os.path.dirname(__file__)),
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertTrue(out.stdout.startswith("True True "), out.stdout)
        self.assertIn("pure-Python path", out.stdout)


if __name__ == "__main__":
    unittest.main()
