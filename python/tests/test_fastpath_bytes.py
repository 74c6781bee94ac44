"""BYTES (TYPE_STRING) tensors through the compiled fast path
(stubvisor/fastpath_bytes.c) against the pure-Python path: the same
outputs returned by execute must reach the supervisor as the same frame,
and whatever the C code does not take (odd element types, no elements,
too large for the message) must go the Python way with its results and
errors. Skipped without the compiled module, as test_fastpath."""

import contextlib
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import triton_python_backend_utils as pb  # noqa: E402
from stubvisor import execute as execmod  # noqa: E402
from stubvisor import ipc  # noqa: E402

from .stubharness import WAIT  # noqa: E402
from .test_fastpath import FAST, Region, _rss_kib, inline, needs_fast, python_pb, request  # noqa: E402


def obj(*items):
    return np.array(items + (None,), dtype=np.object_)[:-1]  # (no numpy conversion of the items)


class _Bytes(bytes):
    pass


# name -> (the tensors execute returns for each request, whether the
# compiled encoder takes the batch). Tensors made with _tensor_from_array skip the
# constructor's checks, as a model reaching into pb_utils could.
def output_cases():
    strings = obj(*[b"string-%02d" % i for i in range(16)])
    return {
        "16 bytes": (lambda: [pb.Tensor("OUT", strings)], True),
        "empty strings": (lambda: [pb.Tensor("OUT", obj(b"", b"", b"x", b""))], True),
        "non-ASCII str": (lambda: [pb.Tensor("OUT", obj("h\u00e9llo", "\u65e5\u672c", "", "\U0001f600"))], True),
        "np.bytes_ elements": (lambda: [pb.Tensor("OUT", obj(np.bytes_(b"ab"), np.bytes_(b""), b"c"))], True),
        "mixed bytes, str, np.bytes_": (lambda: [pb.Tensor("OUT", obj(b"a", "b", np.bytes_(b"c\x00")))], True),
        "S dtype, trailing NULs dropped": (lambda: [pb.Tensor("OUT", np.array([b"a", b"bc", b"", b"d\x00e"], "S4"))],
                                           True),
        "S1 dtype": (lambda: [pb.Tensor("OUT", np.array([b"a", b"b"], "S1"))], True),
        "2-D": (lambda: [pb.Tensor("OUT", strings.reshape(4, 4))], True),
        "scalar": (lambda: [pb.Tensor("OUT", np.array(b"one", dtype=np.object_))], True),
        "bytes and fp32": (lambda: [pb.Tensor("OUT", strings), pb.Tensor("F", np.arange(4, dtype=np.float32))], True),
        "exactly INLINE_MAX": (lambda: [pb.Tensor("OUT", obj(b"x" * (ipc.INLINE_MAX - 4)))], True),
        # The Python path's.
        "int and float elements": (lambda: [pb.Tensor("OUT", obj(1, 2.5, None))], False),
        "bytes and an int": (lambda: [pb.Tensor("OUT", obj(b"a", 3))], False),
        "np.str_ element": (lambda: [pb.Tensor("OUT", obj(np.str_("s"), b"t"))], False),
        "bytearray element": (lambda: [pb.Tensor("OUT", obj(bytearray(b"ba"), b"t"))], False),
        "bytes subclass": (lambda: [pb.Tensor("OUT", obj(_Bytes(b"sub"), b"t"))], False),
        "lone surrogate": (lambda: [pb.Tensor("OUT", obj("\ud800"))], False),
        "no elements": (lambda: [pb.Tensor("OUT", obj())], False),
        "no elements, 2-D": (lambda: [pb.Tensor("OUT", np.empty((0, 3), dtype=np.object_))], False),
        "one over INLINE_MAX": (lambda: [pb.Tensor("OUT", obj(b"x" * (ipc.INLINE_MAX - 3)))], False),
        "large, to the arena": (lambda: [pb.Tensor("OUT", obj(*[b"element-%04d" % i for i in range(300)]))], False),
        "large str, to the arena": (lambda: [pb.Tensor("OUT", obj(*["\u00e9l\u00e9ment-%d" % i for i in range(200)]))],
                                    False),
        "not contiguous": (lambda: [pb._tensor_from_array("OUT", pb._BYTES, strings[::2])], False),
        "fp32 array as BYTES": (lambda: [pb._tensor_from_array("OUT", pb._BYTES, np.arange(3, dtype=np.float32))],
                                False),
        "U dtype as BYTES": (lambda: [pb._tensor_from_array("OUT", pb._BYTES, np.array(["ab", "c"]))], False),
        "a list as BYTES": (lambda: [pb._tensor_from_array("OUT", pb._BYTES, [b"a"])], False),
    }


class BytesOutputsTest(unittest.TestCase):
    maxDiff = None
    def setUp(self):
        self.region = Region(self)
        host = self.region.host
        self.frames = []
        self.encoded = []
        ch = host.ch
        send, send_frame, fast_done = ch.send, ch.send_frame, execmod._fast_done

        # What the stub puts on the ring, as bytes, whichever way it goes.
        def record_send(msg, wake=True):
            self.frames.append(ch._packer.pack(msg))
            return send(msg, wake)

        def record_frame(data):
            self.frames.append(bytes(data))
            return send_frame(data)

        # Whether the compiled encoder took the batch.
        def record_done(*args):
            frame = fast_done(*args)
            self.encoded.append(frame is not None)
            return frame

        def restore():
            execmod._fast_done = fast_done

        ch.send, ch.send_frame, execmod._fast_done = record_send, record_frame, record_done
        self.addCleanup(restore)

    def run_both(self, requests):
        """(fast, python): (decoded ExecuteDone, frames, whether the
        compiled encoder took the batch) of each path."""
        out = []
        for fast in (True, False):
            self.frames.clear()
            self.encoded.clear()
            if fast:
                done, _ = self.region.run(requests)
            else:
                saved = execmod._fast_requests, execmod._fast_done
                execmod._fast_requests = execmod._fast_done = None
                try:
                    with python_pb():
                        done, _ = self.region.run(requests)
                finally:
                    execmod._fast_requests, execmod._fast_done = saved
            out.append((done, list(self.frames), any(self.encoded)))
        return out

    @needs_fast
    def test_outputs_match_python(self):
        batches = {"one request": [request(1, [])], "batch of two": [request(5, []), request(6, [])]}
        for name, (make, encoded) in output_cases().items():
            self.region.host.model.execute = lambda reqs, make=make: [pb.InferenceResponse(make()) for _ in reqs]
            for batch, requests in batches.items():
                with self.subTest(case=name, batch=batch):
                    (fast_done, fast_frames, fast_encoded), (py_done, py_frames, _) = self.run_both(requests)
                    self.assertEqual(fast_done, py_done)
                    self.assertEqual(fast_encoded, encoded)
                    arena = any(t[3] == ipc.LOC_ARENA1 for r in py_done[3] for t in r[3]) if py_done[0] != "raised" \
                        else False
                    if not arena:  # (arena offsets differ between runs; their bytes are compared above)
                        self.assertEqual(fast_frames, py_frames)
                    if encoded:
                        self.assertIsNone(fast_done[2], fast_done)
        # The lone surrogate fails the batch in both, with the codec's text.
        self.region.host.model.execute = lambda reqs: [pb.InferenceResponse([pb.Tensor("OUT", obj("\ud800"))])]
        (fast_done, _, _), _ = self.run_both([request(1, [])])
        self.assertIn("surrogates not allowed", fast_done[2][1])

    @needs_fast
    def test_requested_outputs_and_identity(self):
        # identity_all's way: the BYTES input comes back as the output.
        strings = pb.serialize_byte_tensor(obj(*[b"s-%02d" % i for i in range(16)], "\u00e9"))
        self.region.host.model.execute = lambda reqs: [
            pb.InferenceResponse([pb.Tensor("OUT_" + t.name(), t.as_numpy()) for t in r.inputs()]) for r in reqs]
        cases = {
            "inline input": [request(1, [inline("S", 13, [17], strings)])],
            "2-D input": [request(1, [inline("S", 13, [17, 1], strings)])],
            "arena input": [request(1, [self.region.arena_input("S", 13, [17], strings)])],
            "requested one of two": [request(1, [inline("S", 13, [17], strings), inline("T", 13, [17], strings)],
                                             ["OUT_T"])],
        }
        for name, requests in cases.items():
            with self.subTest(case=name):
                (fast_done, fast_frames, encoded), (py_done, py_frames, _) = self.run_both(requests)
                self.assertEqual(fast_done, py_done)
                self.assertEqual(fast_frames, py_frames)
                self.assertTrue(encoded)
                self.assertEqual(fast_done[3][0][3][0][6], strings)


def _serialize_python(array):
    with python_pb():
        return pb.serialize_byte_tensor(array)


class SerializeTest(unittest.TestCase):
    """pb_utils.serialize_byte_tensor and deserialize_bytes_tensor with
    and without their compiled stand-ins."""

    @needs_fast
    def test_serialize_matches(self):
        arrays = {name: make()[0]._np for name, (make, _) in output_cases().items()
                  if not isinstance(make()[0]._np, list)}
        arrays.update({
            "fortran order": np.asfortranarray(np.array([[b"a", b"b"], [b"c", b"d"]], dtype=np.object_)),
            "S0-like": np.zeros(3, dtype="S1"),
        })
        for name, array in arrays.items():
            with self.subTest(case=name):
                got, want = [], []
                for fn, out in ((pb.serialize_byte_tensor, got), (_serialize_python, want)):
                    try:
                        data = fn(array)
                        out.append(("ok", type(data), data))
                    except Exception as exc:
                        out.append((type(exc).__name__, str(exc)))
                self.assertEqual(got, want)
        self.assertIsNone(FAST.serialize_bytes([b"a"]))
        self.assertIsNone(FAST.serialize_bytes(obj(b"a", 1)))
        self.assertEqual(FAST.serialize_bytes(obj()), b"")

    @needs_fast
    def test_deserialize_matches(self):
        good = pb.serialize_byte_tensor(obj(b"", b"a", b"bc" * 300, "\u00e9"))
        for data in (good, b"", good[:3], good[:-1], b"\x05\x00\x00\x00ab", bytearray(good), memoryview(good),
                     np.frombuffer(good, np.uint8)):
            with self.subTest(data=bytes(data)[:12]):
                got, want = [], []
                for out in (got, want):
                    with python_pb() if out is want else contextlib.nullcontext():
                        try:
                            a = pb.deserialize_bytes_tensor(data)
                            out.append((a.dtype.str, a.shape, a.tolist(), a.flags.writeable,
                                        [type(x) for x in a.tolist()]))
                        except ValueError as exc:
                            out.append(("error", str(exc)))
                self.assertEqual(got, want)
        with self.assertRaises(TypeError):
            FAST.bytes_array("not a buffer")

    @needs_fast
    def test_memory_flat_over_many_requests(self):
        # 100k BYTES requests through the compiled paths (input array,
        # output encoding; str elements among them), and the two pb_utils
        # functions with good and malformed data: a reference leaked per
        # call would grow RSS by megabytes.
        region = Region(self)
        host, sup = region.host, region.sup
        strings = pb.serialize_byte_tensor(obj(*[b"string-%02d" % i for i in range(16)]))
        text = obj("\u00e9t\u00e9", "summer", np.bytes_(b"x"))
        data = ipc.msgpack.packb([ipc.KIND_EXECUTE, 9, [request(1, [inline("IN", 13, [16], strings)])]],
                                 use_bin_type=True)
        host.model.execute = lambda reqs: [
            pb.InferenceResponse([pb.Tensor("OUT", r._inputs[0].as_numpy()), pb.Tensor("TXT", text)]) for r in reqs]
        big = obj(*[b"element-%04d" % i for i in range(100)])

        def loop(n):
            for _ in range(n):
                sup._push_slow(data)
                host._on_execute(host._next_command())
                done = sup.recv(WAIT)
                pb.deserialize_bytes_tensor(pb.serialize_byte_tensor(big))
                try:
                    pb.deserialize_bytes_tensor(strings[:-1])
                except ValueError:
                    pass
            return done

        done = loop(20000)
        self.assertIsNone(done[2], done)
        self.assertEqual(done[3][0][3][0][6], strings)
        before = _rss_kib()
        loop(100000)
        grown = _rss_kib() - before
        self.assertLess(grown, 2048, "RSS grew by %d KiB over 100k requests" % grown)
        # Nothing kept a reference to the elements it wrote.
        counts = [sys.getrefcount(x) for x in text]
        for _ in range(1000):
            FAST.serialize_bytes(text)
        self.assertEqual([sys.getrefcount(x) for x in text], counts)


if __name__ == "__main__":
    unittest.main()
