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


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    case = sys.argv[2] if len(sys.argv) > 2 else "add_sub"
    sup, host, inputs = setup(case)

    def one(i):
        sup.send([ipc.KIND_EXECUTE, i, [[i, "", 0, 0, inputs, [], "", 0]]])
        host._on_execute(host._next_command())
        done = sup.recv(5)
        assert done[0] == ipc.KIND_EXECUTE_DONE and done[2] is None, done

    one(0)
    if "valgrind" in os.environ.get("LD_PRELOAD", "") or os.environ.get("PYSTUB_LOOP_ONCE"):
        for i in range(n):
            one(i)
        return
    best = min(_timed(one, n) for _ in range(5))
    print("python stub %s: %.2f us per request" % (case, best))


def _timed(one, n):
    t = time.perf_counter()
    for i in range(n):
        one(i)
    return (time.perf_counter() - t) / n * 1e6


if __name__ == "__main__":
    main()
