"""The Python stub's own cost per request, without processes or waits:
the supervisor's side of a region (stubvisor.ipc, Python) and the stub's
Host in one thread run add_sub (16 x FP32) N times. Under callgrind the
difference of two N gives instructions per request, which the machine's
load does not move (docs/performance.md):

    valgrind --tool=callgrind python3 pystub_loop.py 1000
    valgrind --tool=callgrind python3 pystub_loop.py 3000

Without valgrind it prints the best time per request of five runs.
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

MODEL = os.path.join(REPO, "testdata", "models", "add_sub")
CONFIG = {"name": "add_sub",
          "input": [{"name": n, "data_type": "TYPE_FP32", "dims": [16]} for n in ("INPUT0", "INPUT1")],
          "output": [{"name": n, "data_type": "TYPE_FP32", "dims": [16]} for n in ("OUTPUT0", "OUTPUT1")]}


def setup():
    sup = ipc.Channel._create(spin_ns=0, arena_max=1 << 26)
    host = hostmod.Host(ipc.Channel.attach(os.dup(sup.fd)), "add_sub_0_0")
    pb._runtime, pb._view, pb._cuda = host, host._view, host._cuda
    args = {"model_config": json.dumps(CONFIG), "model_instance_kind": "CPU", "model_instance_name": "add_sub_0_0",
            "model_instance_device_id": "0", "model_repository": MODEL, "model_version": "1", "model_name": "add_sub"}
    sup.send([ipc.KIND_INITIALIZE, 1, args, {"model_file": os.path.join(MODEL, "1", "model.py")}])
    host._on_initialize(host._next_command())
    while True:
        m = sup.recv(5)
        if m[0] == ipc.KIND_RESULT:
            assert m[2] is None, m
            break
    values = (np.arange(16, dtype=np.float32) + 0.5).tobytes()
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        off = sup.alloc(64)
        sup.view(ipc.LOC_ARENA0, off, 64)[:] = values
        inputs.append([name, 11, [16], ipc.LOC_ARENA0, off, 64])
    return sup, host, inputs


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    sup, host, inputs = setup()

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
    print("python stub add_sub 16xFP32: %.2f us per request" % best)


def _timed(one, n):
    t = time.perf_counter()
    for i in range(n):
        one(i)
    return (time.perf_counter() - t) / n * 1e6


if __name__ == "__main__":
    main()
