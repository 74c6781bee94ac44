"""The calling stub's BLS path in C (stubvisor/fastpath_bls*.c) against the
pure-Python path it stands in for (test_fastpath.py does the same for the
execute path; this file is its BLS half). Each case runs once with the
compiled functions installed and once with the Python ones
(native_bls.uninstall), each on a fresh in-process Host whose supervisor
side a thread plays: the InferExec frames must be the same bytes, and the
model must get the same result (or the same exception) for a table of
requests, answers, errors and malformed answers. Without the compiled
module the comparisons skip and the rest of the suite covers the Python
path."""

import asyncio
import gc
import os
import sys
import threading
import time
import tracemalloc
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import triton_python_backend_utils as pb  # noqa: E402
from stubvisor import ipc, native  # noqa: E402

from .stubharness import WAIT, add_sub_host  # noqa: E402
from .test_fastpath import _rss_kib  # noqa: E402

FAST = native.FAST
if FAST is not None:
    from stubvisor import native_bls
needs_fast = unittest.skipIf(FAST is None or not hasattr(FAST, "setup_bls"),
                             "compiled BLS path not loaded: " + native.REASON)
FINAL = ipc.FLAG_FINAL


def _echo(call_id, wire):
    """The callee's usual answer: each input back as OUT_<name>, in the
    message."""
    outs = [["OUT_" + t[0], t[1], t[2], ipc.LOC_INLINE, 0, t[5], t[6]] for t in wire[4] if t[3] == ipc.LOC_INLINE]
    return [[call_id, FINAL, None, outs, ""]]


class Callee:
    """The supervisor's side of a region and a Host on its stub side; a
    thread answers every InferExec with answer(call_id, request wire) ->
    wire responses. With keep it keeps every frame it read, as bytes
    (frames; received counts the messages read, so that a test can see
    none was missed); the tests of memory over many calls leave it off,
    as the frames grow with the calls. hold, when given, runs before each
    answer (to make the caller wait for it)."""

    def __init__(self, test, answer, keep=True, hold=None):
        self.sup, self.host = add_sub_host(test)
        self.answer, self.hold = answer, hold
        self.frames = []
        self.received = self.held = 0
        if keep:
            unpack = ipc._unpack_strict

            def keep_frame(data):
                self.frames.append(bytes(data))
                return unpack(data)

            self.sup._fast_in = ipc.FAST_RING(self.sup, self.sup._in, keep_frame)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()
        test.addCleanup(self.close)

    def serve(self):
        ring = self.sup._in
        while not self.stop.is_set():
            # Until a frame is queued: recv then takes it through the fast
            # ring's pop, whose unpacker keeps it (recv's own wait decodes
            # a frame that comes meanwhile with the plain unpacker).
            if not self.sup._wait_change(ring.load_tail, ring.cursor, ring.tail_addr, ring.reader_sleeping_addr,
                                         time.monotonic() + 0.05):
                continue
            msg = self.sup.recv(0)
            if msg is None:
                continue
            self.received += 1
            if msg[0] != ipc.KIND_INFER_EXEC:
                continue
            if self.hold is not None:
                self.hold(self)
            for wire in self.answer(msg[1], msg[4]):
                self.sup.send([ipc.KIND_INFER_RESULT, msg[1], wire])

    def close(self):
        self.stop.set()
        self.thread.join(WAIT)

    def arena(self, data):
        off = self.sup.alloc(len(data))
        self.sup.view(ipc.LOC_ARENA0, off, len(data))[:] = data
        return off


def describe(result):
    """What a model can see of a BLS result."""
    if isinstance(result, tuple):
        return result
    outs = []
    for t in result.output_tensors():
        a = t.as_numpy()
        outs.append((type(t), t.name(), t.triton_dtype(), t.shape(),
                     (a.dtype.str, a.shape, a.tolist(), a.flags.writeable, a.flags.c_contiguous)))
    err = result.error()
    return (type(result), outs, None if err is None else (type(err), err.message(), err.code()),
            result.parameters(), result._release)


def _call(make, mode):
    try:
        request = make()
        if mode == "sync":
            return request.exec()

        async def run():
            return await request.async_exec()

        return asyncio.run_coroutine_threadsafe(run(), pb._runtime._async_loop()).result(WAIT)
    except Exception as exc:
        return ("raised", type(exc).__name__, str(exc))


F32 = np.arange(16, dtype=np.float32) + 0.5


def _requests():
    """name -> a function that builds the BLS request."""
    t = lambda name="IN", a=F32: pb.Tensor(name, a)  # noqa: E731
    req = pb.InferenceRequest
    return {
        "usual": lambda: req(model_name="m", requested_output_names=["OUT_IN"], inputs=[t()]),
        "every argument": lambda: req(request_id="r-1", correlation_id=7, inputs=[t()], requested_output_names=[],
                                      model_name="m", model_version=3, flags=2, timeout=90),
        "positional": lambda: req("r", 1 << 40, [t()], ["A", "A", "B"], "m", -1, 0, 5),
        "string correlation id": lambda: req(model_name="m", requested_output_names=[], inputs=[t()],
                                             correlation_id="seq-9"),
        "two inputs, types": lambda: req(model_name="m", requested_output_names=[],
                                         inputs=[t("A", np.arange(6, dtype=np.int8).reshape(2, 3)),
                                                 t("B", np.array([True, False])), t("C", np.float16([1.5]))]),
        "no inputs": lambda: req(model_name="m", requested_output_names=[], inputs=[]),
        "empty input": lambda: req(model_name="m", requested_output_names=[], inputs=[t("E", np.zeros(0, np.float32))]),
        "input in the arena": lambda: req(model_name="m", requested_output_names=[],
                                          inputs=[t("BIG", np.arange(2048, dtype=np.float32))]),
        "inline then arena": lambda: req(model_name="m", requested_output_names=[],
                                         inputs=[t("A"), t("BIG", np.arange(2048, dtype=np.float32))]),
        "bytes input": lambda: req(model_name="m", requested_output_names=[],
                                   inputs=[t("S", np.array([b"ab", b"c"], dtype=np.object_))]),
        "parameters": lambda: req(model_name="m", requested_output_names=[], inputs=[t()], parameters={"a": 1}),
        "trace context": lambda: req(model_name="m", requested_output_names=[], inputs=[t()],
                                     trace=pb.InferenceTrace("ctx-1")),
        "model name as bytes": lambda: req(model_name=b"m", requested_output_names=[], inputs=[t()]),
        "input not a tensor": lambda: req(model_name="m", requested_output_names=[], inputs=[F32]),
        "model name None": lambda: req(model_name=None, requested_output_names=[], inputs=[t()]),
        "no model name": lambda: req(requested_output_names=[], inputs=[t()]),
        "unknown argument": lambda: req(model_name="m", requested_output_names=[], inputs=[t()], colour=1),
        "bool correlation id": lambda: req(model_name="m", requested_output_names=[], inputs=[t()],
                                           correlation_id=True),
    }


def _answers(callee):
    """name -> answer(call_id, wire) for the callee."""
    f32 = F32.tobytes()
    strings = pb.serialize_byte_tensor(np.array([b"x", b"yz"], dtype=np.object_))
    big = np.arange(512, dtype=np.float32).tobytes()

    def outputs(*outs):
        return lambda cid, wire: [[cid, FINAL, None, list(outs), ""]]

    def arena(cid, wire):
        return [[cid, FINAL, None, [["O", 11, [512], ipc.LOC_ARENA0, callee.arena(big), len(big)]], ""]]

    def bytes_arena(cid, wire):
        return [[cid, FINAL, None, [["S", 13, [2], ipc.LOC_ARENA0, callee.arena(strings), len(strings)]], ""]]

    inline = ["O", 11, [4, 4], ipc.LOC_INLINE, 0, 64, f32]
    table = {
        "echo": _echo,
        "two outputs": outputs(inline, ["P", 8, [2], ipc.LOC_INLINE, 0, 8, b"\1\0\0\0\2\0\0\0"]),
        "no outputs": outputs(),
        "error": lambda cid, wire: [[cid, FINAL, [3, "callee failed"], [], ""]],
        "parameters": lambda cid, wire: [[cid, FINAL, None, [inline], '{"k": 1}']],
        "short wire": lambda cid, wire: [[cid, FINAL, None, [inline]]],
        "stream of three": lambda cid, wire: [[cid, 0, None, [], ""], [cid, 0, None, [inline], ""],
                                              [cid, FINAL, None, [], ""]],
        "output in the arena": arena,
        "bytes inline": outputs(["S", 13, [2], ipc.LOC_INLINE, 0, len(strings), strings]),
        "bytes in the arena": bytes_arena,
        "empty output": outputs(["E", 11, [0], ipc.LOC_NONE, 0, 0]),
        "bad shape": outputs(["O", 11, [3], ipc.LOC_INLINE, 0, 64, f32]),
        "bad size": outputs(["O", 11, [16], ipc.LOC_INLINE, 0, 60, f32]),
        "unknown dtype": outputs(["O", 99, [16], ipc.LOC_INLINE, 0, 64, f32]),
        "negative dim": outputs(["O", 11, [-16], ipc.LOC_INLINE, 0, 64, f32]),
        "short output": outputs(["O", 11, [16]]),
        "output not a list": outputs(7),
        "error not a list": lambda cid, wire: [[cid, FINAL, "boom", [], ""]],
        "flags not an int": lambda cid, wire: [[cid, "final", None, [], ""]],
        "wire not a list": lambda cid, wire: [5],
        # The frame decoder's kinds: str8/str16, bin16, negative and
        # 64-bit ints, and a float and a map (left to the unpacker).
        "long texts": lambda cid, wire: [[cid, FINAL, None, [["N" * 40, 11, [4, 4], ipc.LOC_INLINE, 0, 64, f32]],
                                          '{"k": "%s"}' % ("v" * 300)]],
        "largest inline output": outputs(["O", 11, [256], ipc.LOC_INLINE, 0, 1024, big[:1024]]),
        "negative and huge ints": lambda cid, wire: [[cid, -1, None, [["O", 9, [1], ipc.LOC_INLINE, 0, 8,
                                                                      (-5).to_bytes(8, "little", signed=True)]],
                                                      ""], [(1 << 64) - 1, -40000, None, [], ""]],
        "float in the answer": lambda cid, wire: [[cid, FINAL, [1.5, "x"], [], ""]],
        "map in the answer": lambda cid, wire: [[cid, FINAL, None, [], {"k": 1}]],
    }
    return table


# Answers that make _bls_response raise: a sync call raises it to the
# model, while on the stub's event loop it ends the loop's thread in both
# paths (the supervisor never sends them), so only sync calls take them.
MALFORMED = ("float in the answer", "bad shape", "bad size", "unknown dtype", "negative dim", "short output", "output not a list",
             "error not a list", "flags not an int", "wire not a list")


@needs_fast
class BLSMatchesPythonTest(unittest.TestCase):
    def both(self, answer_name, make, mode):
        """(fast, python): frames sent and result of one call each way."""
        got = []
        for fast in (True, False):
            if not fast:
                native_bls.uninstall()
                self.addCleanup(native_bls.install, FAST)
            callee = Callee(self, lambda cid, wire: answers[answer_name](cid, wire))
            answers = _answers(callee)
            result = describe(_call(make, mode))
            callee.close()
            self.assertEqual(len(callee.frames), callee.received, "frames read but not kept")
            # Calls left open (a malformed answer fails the call before
            # its final response is taken) as in the Python path.
            got.append((callee.frames, (result, sorted(callee.host._calls), callee.host._async_open)))
            if not fast:
                native_bls.install(FAST)
        return got

    def test_requests(self):
        for mode in ("sync", "async"):
            for name, make in _requests().items():
                with self.subTest(mode=mode, request=name):
                    (fast_frames, fast), (py_frames, py) = self.both("echo", make, mode)
                    self.assertEqual(fast_frames, py_frames)
                    if fast[0][0] != "raised":
                        self.assertTrue(fast_frames)
                    self.assertEqual(fast, py)

    def test_answers(self):
        make = _requests()["usual"]
        for mode in ("sync", "async"):
            for name in _answers(None):
                if mode == "async" and name in MALFORMED:
                    continue
                with self.subTest(mode=mode, answer=name):
                    (fast_frames, fast), (py_frames, py) = self.both(name, make, mode)
                    self.assertEqual(fast_frames, py_frames)
                    self.assertTrue(fast_frames)
                    self.assertEqual(fast, py)
                    if name in ("echo", "error", "output in the arena", "bytes in the arena"):
                        self.assertNotEqual(fast[0], "raised", fast)

    def test_bls_response_table(self):
        # _bls_response alone, compiled and Python, over the same wires.
        callee = Callee(self, _echo)
        host = callee.host
        for name, answer in _answers(callee).items():
            with self.subTest(answer=name):
                request = [1, "", 0, 0, [["IN", 11, [16], ipc.LOC_INLINE, 0, 64, F32.tobytes()]], [], "", 0]
                for wire in answer(1, request):
                    got, want = [], []
                    for fn, out in ((host._bls_response, got), (lambda w: native_bls.PY_BLS_RESPONSE(host, w), want)):
                        try:
                            out.append(describe(fn(list(wire))))
                        except Exception as exc:
                            out.append((type(exc).__name__, str(exc)))
                    self.assertEqual(got, want)

    def test_not_in_execute(self):
        # No runtime, or one that does not allow BLS: the same errors.
        make = _requests()["usual"]
        saved = pb._runtime
        try:
            for rt in (None, Callee(self, _echo).host):
                pb._runtime = rt
                if rt is not None:
                    rt.initialized = False
                got = describe(_call(make, "sync"))
                native_bls.uninstall()
                try:
                    want = describe(_call(make, "sync"))
                finally:
                    native_bls.install(FAST)
                self.assertEqual(got, want)
                self.assertEqual(got[0], "raised")
        finally:
            pb._runtime = saved

    def test_exec_arguments(self):
        callee = Callee(self, _echo)
        request = _requests()["usual"]()
        self.assertEqual(describe(request.exec(False)), describe(request.exec(decoupled=False)))
        with self.assertRaises(TypeError):
            request.exec(None)
        stream = request.exec(decoupled=True)
        self.assertEqual([describe(r)[1][0][1] for r in stream], ["OUT_IN"])
        self.assertEqual(callee.host._calls, {})

    def test_memory_flat_over_many_calls(self):
        # Sync and async calls through the C path: a reference leaked per
        # call would grow RSS by megabytes. (The callee keeps no frames:
        # kept, they grew RSS by about 150 bytes each.)
        callee = Callee(self, _echo, keep=False)
        loop = callee.host._async_loop()
        for mode, n in (("sync", 4000), ("async", 1000)):
            _many(loop, n, mode)
        before = _rss_kib()
        for mode, n in (("sync", 20000), ("async", 5000)):
            _many(loop, n, mode)
        grown = _rss_kib() - before
        self.assertLess(grown, 2048, "RSS grew by %d KiB over 25k calls" % grown)
        self.assertEqual(callee.host._calls, {})

    def test_blocks_flat_on_each_wait(self):
        # The turns a call takes by when its answer comes: answered at
        # once; answered only once the caller sleeps on the ring (sync,
        # and the event loop's read), made to happen on every call rather
        # than left to the load of the machine; eight async calls at a
        # time, whose answers queue for the loop's read. A reference or
        # a buffer leaked per call on any of them leaves a block a call
        # or more, which tracemalloc counts.
        # (Eight at a time, the first windows traced grow by up to 230
        # blocks, as many on the Python path: asyncio's caches settling,
        # fewer each window after.)
        n = 2000
        for mode, hold in (("sync", None), ("sync", _once_asleep), ("async", _once_asleep),
                           ("async, eight at a time", None)):
            with self.subTest(mode=mode, answer="once the caller sleeps" if hold else "at once"):
                callee = Callee(self, _echo, keep=False, hold=hold)
                loop = callee.host._async_loop()
                _many(loop, 200, mode)
                tracemalloc.start()
                try:
                    _many(loop, 200, mode)
                    before = _blocks()
                    _many(loop, n, mode)
                    grown = _blocks() - before
                finally:
                    tracemalloc.stop()
                self.assertLess(grown, n // 4, "%d blocks more after %d calls" % (grown, n))
                self.assertEqual(callee.host._calls, {})
                if hold is not None:
                    self.assertEqual(callee.held, 200 + 200 + n)


def _usual():
    return pb.InferenceRequest(model_name="m", requested_output_names=["OUT_IN"], inputs=[pb.Tensor("IN", F32)])


def _many(loop, n, mode):
    """n calls of the usual request: sync from this thread, or async on
    the host's event loop, one after another or eight at a time."""
    if mode == "sync":
        for _ in range(n):
            r = _usual().exec()
            assert pb.get_output_tensor_by_name(r, "OUT_IN").as_numpy()[3] == 3.5
        return

    async def chain():
        if mode == "async":
            for _ in range(n):
                r = await _usual().async_exec()
                assert not r.has_error()
            return
        for _ in range(n // 8):
            for r in await asyncio.gather(*(_usual().async_exec() for _ in range(8))):
                assert not r.has_error()

    asyncio.run_coroutine_threadsafe(chain(), loop).result(60)


def _once_asleep(callee):
    """A Callee's hold: poll, within WAIT, until the stub's reader sleeps
    on its ring (the caller, or the event loop's thread, waits for the
    answer), yielding the GIL between looks; counted in callee.held."""
    flag = callee.host.ch._in.reader_sleeping
    deadline = time.monotonic() + WAIT
    while not flag.value:
        if time.monotonic() > deadline:
            return
        os.sched_yield()
    callee.held += 1


def _blocks():
    """The memory blocks tracemalloc traces, after a collection."""
    gc.collect()
    return len(tracemalloc.take_snapshot().traces)


@needs_fast
class BLSConstructorTest(unittest.TestCase):
    """InferenceRequest built by the compiled __init__ and by the Python one
    hold the same slots, or fail with the same exception;
    get_output_tensor_by_name finds the same tensor."""

    def test_request(self):
        for name, make in _requests().items():
            with self.subTest(request=name):
                got = self.slots(make)
                native_bls.uninstall()
                try:
                    want = self.slots(make)
                finally:
                    native_bls.install(FAST)
                self.assertEqual(got, want)

    @staticmethod
    def slots(make):
        try:
            r = make()
        except Exception as exc:
            return (type(exc).__name__, str(exc))
        d = {s: getattr(r, s) for s in pb.InferenceRequest.__slots__ if s != "__weakref__"}
        d["_inputs"] = [(t.name(), t.triton_dtype()) for t in d["_inputs"]]
        d["_trace"] = (type(d["_trace"]), d["_trace"].get_context())
        return d

    def test_request_holds_copies(self):
        t, names = pb.Tensor("A", F32), ["X", "Y", "X"]
        inputs = [t]
        r = pb.InferenceRequest(model_name="m", requested_output_names=names, inputs=inputs)
        self.assertIsNot(r._inputs, inputs)
        self.assertIs(r._inputs[0], t)
        self.assertEqual((r._requested, names), (["X", "Y"], ["X", "Y", "X"]))

    def test_get_output_tensor_by_name(self):
        a, b = pb.Tensor("A", F32), pb.Tensor("B", F32)
        response = pb.InferenceResponse([a, b])

        class Other:
            def output_tensors(self):
                return [b]

        for resp in (response, pb.InferenceResponse([]), Other()):
            for name in ("A", "B", "C", 7):
                with self.subTest(response=type(resp).__name__, name=name):
                    self.assertIs(pb.get_output_tensor_by_name(resp, name), native_bls.PY_GET_OUTPUT(resp, name))
        with self.assertRaises(TypeError):
            pb.get_output_tensor_by_name(response)


if __name__ == "__main__":
    unittest.main()
