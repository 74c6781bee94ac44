"""The calling stub's cost per BLS call: a real stub process (python -m
stubvisor, through python/tests/stubharness.py) runs testdata's bls_chain
(sync exec(), one request per batch) or bls_chain_async (async_exec(), B
requests per batch), and this process plays the supervisor: it answers
every InferExec with the call's input as OUTPUT0, in the message, at once
or, with PYSTUB_BLS_DELAY_US, one answer per that many microseconds (as a
callee that takes that long), and prints the stub's CPU time and context
switches per call (the stub's poll is off, PYSTUB_BLS_SPIN_NS sets it).

    python3 pystub_bls.py async 100 16
    PYSTUB_BLS_VALGRIND=/tmp/vg10.log python3 pystub_bls.py async 10 16
    PYSTUB_BLS_VALGRIND=/tmp/vg40.log python3 pystub_bls.py async 40 16

With PYSTUB_BLS_VALGRIND the stub runs under callgrind, which writes its
total ("Collected") to that log: the difference of two runs divided by
the difference of their calls (3 per chain: 30 batches x 16 x 3 above) is
the stub's instructions per call, which the machine's load does not move
(docs/performance.md, "Round 4"). A chain's own request (its decode and
encode) is spread over its three calls.
"""

import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python", "tests"))

import numpy as np  # noqa: E402

import stubharness  # noqa: E402
from stubharness import K, MODELS, Stub, ipc  # noqa: E402

FINAL = 1
LONG_WAIT = 600.0  # seconds: a stub under valgrind is slow


def _setup_harness():
    create = ipc.Channel._create.__func__
    spin = int(os.environ.get("PYSTUB_BLS_SPIN_NS", "0"))
    ipc.Channel._create = classmethod(lambda cls, **kw: create(cls, spin_ns=spin, **kw))
    log = os.environ.get("PYSTUB_BLS_VALGRIND")
    if not log:
        return
    popen = subprocess.Popen

    class ValgrindPopen(popen):
        def __init__(self, args, *a, **kw):
            super().__init__(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", "--log-file=" + log]
                             + list(args), *a, **kw)

    stubharness.subprocess.Popen = ValgrindPopen
    stubharness.WAIT = LONG_WAIT
    for f in (Stub.recv, Stub.expect):
        f.__defaults__ = (LONG_WAIT,)


def _usage(pid):
    """CPU seconds and voluntary / involuntary context switches of pid's
    threads."""
    cpu = vol = invol = 0
    for t in os.listdir("/proc/%d/task" % pid):
        fields = open("/proc/%d/task/%s/stat" % (pid, t)).read().rsplit(")", 1)[1].split()
        cpu += int(fields[11]) + int(fields[12])
        status = open("/proc/%d/task/%s/status" % (pid, t)).read()
        vol += int(status.split("\nvoluntary_ctxt_switches:")[1].split()[0])
        invol += int(status.split("nonvoluntary_ctxt_switches:")[1].split()[0])
    return cpu / os.sysconf("SC_CLK_TCK"), vol, invol


class Caller:
    def __init__(self, mode, batch):
        model = "bls_chain_async" if mode == "async" else "bls_chain"
        self.stub = Stub(model + "_0_0")
        self.batch = batch
        self.shape = (1, 16) if mode == "async" else (16,)
        self.delay = float(os.environ.get("PYSTUB_BLS_DELAY_US", "0")) / 1e6
        self.calls = 0
        self.stub.initialize(os.path.join(MODELS, model), {
            "max_batch_size": 16 if mode == "async" else 0,
            "parameters": {"STEPS": {"string_value": "a,b,c"}},
            "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
            "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}]})

    def answer(self, call_id, out):
        self.stub.sup.send([K.KIND_INFER_RESULT, call_id, [call_id, FINAL, None, [out], ""]])

    def next_message(self, pending):
        """The stub's next message; with a delay, answers the oldest
        pending call whenever its time came meanwhile."""
        stub = self.stub
        while self.delay and pending:
            if time.perf_counter() - self.last >= self.delay:
                self.answer(*pending.pop(0))
                self.last = time.perf_counter()
            msg = stub.sup.recv(0)
            if msg is not None:
                return msg
        return stub.recv(LONG_WAIT)

    def one_batch(self):
        stub = self.stub
        array = np.arange(16, dtype=np.float32).reshape(self.shape)
        requests = [stub.request(1000 + i, [stub.tensor("INPUT0", 11, array, True)], ["OUTPUT0"])
                    for i in range(self.batch)]
        batch_id = stub.execute(requests)
        pending = []
        self.last = time.perf_counter()
        while True:
            msg = self.next_message(pending)
            if msg[0] == K.KIND_INFER_EXEC:
                call_id, request = msg[1], msg[4]
                t = request[4][0]
                out = ["OUTPUT0", t[1], t[2], ipc.LOC_INLINE, 0, t[5], t[6]]
                self.calls += 1
                if not self.delay:
                    self.answer(call_id, out)
                    continue
                if not pending:
                    self.last = time.perf_counter()
                pending.append((call_id, out))
            elif msg[0] == K.KIND_EXECUTE_DONE:
                assert msg[1] == batch_id and msg[2] is None, msg
                for response in msg[3]:
                    assert response[2] is None, response
                    stub.release(response)
                return


def main():
    mode, batches = sys.argv[1], int(sys.argv[2])
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    if mode not in ("sync", "async") or (mode == "sync" and batch != 1):
        sys.exit("usage: pystub_bls.py sync|async BATCHES [REQUESTS_PER_BATCH (async)]")
    _setup_harness()
    caller = Caller(mode, batch)
    for _ in range(5):
        caller.one_batch()
    caller.calls = 0
    pid = caller.stub.proc.pid
    cpu0, vol0, invol0 = _usage(pid)
    start = time.perf_counter()
    for _ in range(batches):
        caller.one_batch()
    wall = time.perf_counter() - start
    cpu1, vol1, invol1 = _usage(pid)
    n = caller.calls
    print("%s %d per batch: calls=%d stub_cpu_us_per_call=%.1f voluntary_cs_per_call=%.2f "
          "involuntary_cs_per_call=%.2f wall_us_per_call=%.1f"
          % (mode, batch, n, (cpu1 - cpu0) / n * 1e6, (vol1 - vol0) / n, (invol1 - invol0) / n, wall / n * 1e6))
    caller.stub.finalize()
    caller.stub.close()


if __name__ == "__main__":
    main()
