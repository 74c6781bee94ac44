"""The Python stub's own cost per request, without processes or waits:
the supervisor's side of a region (stubvisor.ipc, Python) and the stub's
Host in one thread run add_sub (16 x FP32) N times, or with "bytes" as
the second argument identity_all with 16 strings (the BYTES case of
make bench-http). Under callgrind the difference of two N gives
instructions per request, which the machine's load does not move
(docs/performance.md):

    valgrind --tool=callgrind python3 pystub_loop.py 1000 [bytes]
    valgrind --tool=callgrind python3 pystub_loop.py 3000 [bytes]

Without valgrind it prints the best time per request of five runs.
Inputs of at most ipc.INLINE_MAX bytes travel in the Execute message, as
the supervisor sends them; PYSTUB_LOOP_ARENA=1 puts them in arena 0.

The supervisor's side costs as little as it can, since in the server it
is Go: it writes each Execute frame from bytes encoded once (the ids
patched in) and reads each ExecuteDone as bytes, decoding only the first
and comparing the others with it. PYSTUB_LOOP_MSGPACK=1 packs and unpacks
both with msgpack instead, as the loop did until the stub's second round
of work (about 35k instructions more per request, the same for every
stub; docs/performance.md). PYSTUB_LOOP_OPCODES=1 prints the bytecodes
of one request per function instead. The stub's compiled fast path
(make fastpath) serves when it is built; STUBVISOR_PY_FASTPATH=0 measures
the pure-Python path.
"""

import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

import numpy as np  # noqa: E402

import triton_python_backend_utils as pb  # noqa: E402
from stubvisor import host as hostmod  # noqa: E402
from stubvisor import ipc  # noqa: E402

def _case(model, inputs, outputs):
    """(model name, its config, {input name: (type code, wire bytes)})."""
    config = {"name": model,
              "input": [{"name": n, "data_type": t, "dims": [16]} for n, t, _, _ in inputs],
              "output": [{"name": n, "data_type": t, "dims": [16]} for n, t in outputs]}
    return model, config, {n: (code, data) for n, _, code, data in inputs}


_FP32 = (np.arange(16, dtype=np.float32) + 0.5).tobytes()
CASES = {
    "add_sub": _case("add_sub", [(n, "TYPE_FP32", 11, _FP32) for n in ("INPUT0", "INPUT1")],
                     [(n, "TYPE_FP32") for n in ("OUTPUT0", "OUTPUT1")]),
    "bytes": _case("identity_all",
                   [("INPUT_STRING", "TYPE_STRING", 13,
                     pb.serialize_byte_tensor(np.array([b"string-%02d" % i for i in range(16)], dtype=np.object_)))],
                   [("OUTPUT_STRING", "TYPE_STRING")]),
}


def setup(case="add_sub"):
    model, config, tensors = CASES[case]
    repo = os.path.join(REPO, "testdata", "models", model)
    instance = model + "_0_0"
    sup = ipc.Channel._create(spin_ns=0, arena_max=1 << 26)
    host = hostmod.Host(ipc.Channel.attach(os.dup(sup.fd)), instance)
    pb._runtime, pb._view, pb._cuda = host, host._view, host._cuda
    args = {"model_config": json.dumps(config), "model_instance_kind": "CPU", "model_instance_name": instance,
            "model_instance_device_id": "0", "model_repository": repo, "model_version": "1", "model_name": model}
    sup.send([ipc.KIND_INITIALIZE, 1, args, {"model_file": os.path.join(repo, "1", "model.py")}])
    host._on_initialize(host._next_command())
    while True:
        m = sup.recv(5)
        if m[0] == ipc.KIND_RESULT:
            assert m[2] is None, m
            break
    inputs = []
    for name, (code, data) in tensors.items():
        if len(data) <= ipc.INLINE_MAX and not os.environ.get("PYSTUB_LOOP_ARENA"):
            # As the supervisor sends a small input: in the message.
            inputs.append([name, code, [16], ipc.LOC_INLINE, 0, len(data), data])
            continue
        off = sup.alloc(len(data))
        sup.view(ipc.LOC_ARENA0, off, len(data))[:] = data
        inputs.append([name, code, [16], ipc.LOC_ARENA0, off, len(data)])
    return sup, host, inputs


def _uint(n):
    """A non-negative int as msgpack encodes it."""
    if n < 128:
        return bytes((n,))
    if n < 0x100:
        return bytes((0xCC, n))
    if n < 0x10000:
        return b"\xcd" + n.to_bytes(2, "big")
    return ipc.msgpack.packb(n)


def _frames(sup, inputs):
    """send(i) and recv(): the supervisor's side of one request i as raw
    frames, through the ring's own write and consume paths."""
    rest = b"".join(ipc.msgpack.packb(x, use_bin_type=True) for x in ("", 0, 0, inputs, [], "", 0))
    r = sup._in
    mv = sup._mv

    def send(u):
        # [KIND_EXECUTE, i, [[i, "", 0, 0, inputs, [], "", 0]]], u: i encoded
        sup._push_slow(b"\x93\x02" + u + b"\x91\x98" + u + rest)

    def recv():
        while True:
            head = r.cursor
            assert r.tail.value != head, "the stub sent nothing"
            pos = head & r.mask
            start = r.data_off + pos
            n = int.from_bytes(mv[start:start + 4], "little")
            if n == ipc.WRAP_MARKER:
                sup._consumed(r, head + r.size - pos)
                continue
            data = bytes(mv[start + 4:start + 4 + n])
            sup._consumed(r, head + ((n + 4 + 7) & ~7))
            return data

    return send, recv


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    case = sys.argv[2] if len(sys.argv) > 2 else "add_sub"
    sup, host, inputs = setup(case)

    if os.environ.get("PYSTUB_LOOP_MSGPACK"):
        def one(i):
            sup.send([ipc.KIND_EXECUTE, i, [[i, "", 0, 0, inputs, [], "", 0]]])
            host._on_execute(host._next_command())
            done = sup.recv(5)
            assert done[0] == ipc.KIND_EXECUTE_DONE and done[2] is None, done
    else:
        send, recv = _frames(sup, inputs)
        # The first answer is decoded and checked; every later one must be
        # the same bytes but for the two ids.
        send(_uint(1))
        host._on_execute(host._next_command())
        first = recv()
        done = ipc.msgpack.unpackb(first, raw=False)
        assert done[0] == ipc.KIND_EXECUTE_DONE and done[2] is None and len(done[3]) == 1, done
        assert done[3][0][0] == 1 and done[3][0][2] is None and done[3][0][3], done
        # [67, 1, nil, [[1, <rest of the response>]]]
        assert first[:6] == b"\x94\x43\x01\xc0\x91\x95", first[:6]
        tail = first[7:]

        def one(i):
            u = _uint(i)
            send(u)
            host._on_execute(host._next_command())
            got = recv()
            if got != b"\x94\x43" + u + b"\xc0\x91\x95" + u + tail:
                raise AssertionError("request %d: unexpected answer %r" % (i, ipc.msgpack.unpackb(got, raw=False)))

    one(0)
    if os.environ.get("PYSTUB_LOOP_OPCODES"):
        _opcodes(one)
        return
    if "valgrind" in os.environ.get("LD_PRELOAD", "") or os.environ.get("PYSTUB_LOOP_ONCE"):
        for i in range(n):
            one(i)
        return
    best = min(_timed(one, n) for _ in range(5))
    print("python stub %s: %.2f us per request" % (case, best))


def _opcodes(one):
    """Print the bytecodes one request executes, per function (Python 3.11
    spends about 60 instructions on each here)."""
    import collections

    counts = collections.Counter()

    def tracer(frame, event, arg):
        frame.f_trace_opcodes = True
        if event == "opcode":
            code = frame.f_code
            counts["%s:%s" % (os.path.basename(code.co_filename), code.co_name)] += 1
        return tracer

    sys.settrace(tracer)
    one(1)
    sys.settrace(None)
    print("bytecodes per request: %d" % sum(counts.values()))
    for name, n in counts.most_common():
        print("%6d  %s" % (n, name))


def _timed(one, n):
    t = time.perf_counter()
    for i in range(n):
        one(i)
    return (time.perf_counter() - t) / n * 1e6


if __name__ == "__main__":
    main()
