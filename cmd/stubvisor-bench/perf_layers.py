"""Split a `perf record -g` profile of a stubvisor server and its stubs
into layers: every sample goes to the innermost frame that names a layer
(Go: ipc, shmpool, supervisor, server JSON parse/write, net/http and the
TCP stack under it, GC, the runtime scheduler; Python stubs: numpy,
msgpack, ctypes, the kernel's futex and sched_yield, the interpreter).
docs/performance.md says how it is used.

Usage: python3 perf_layers.py perf.data [cpu_us_per_req]
"""

import collections
import subprocess
import sys

_GO_LAYERS = (("stubvisor/ipc.", "go: ipc"), ("stubvisor/shmpool.", "go: shmpool"),
              ("stubvisor/supervisor.", "go: supervisor"), ("stubvisor/server.", "go: server"))
_SCHEDULER = ("runtime.schedule", "runtime.findRunnable", "runtime.mcall", "runtime.park_m",
              "runtime.mstart", "runtime.sysmon")


def samples(path):
    """(comm, [frame, ...] leaf first) for every sample; a frame is
    'symbol (dso)'."""
    out = subprocess.run(["perf", "script", "-i", path, "-F", "comm,pid,ip,sym,dso"],
                         capture_output=True, text=True, check=True).stdout
    cur = None
    for line in out.split("\n"):
        if not line.strip():
            if cur:
                yield cur
            cur = None
        elif not line.startswith((" ", "\t")):
            cur = (line.split()[0], [])
        elif cur is not None:
            parts = line.split(None, 1)
            cur[1].append(parts[1] if len(parts) > 1 else "?")
    if cur:
        yield cur


def python_layer(stack):
    leaf = stack[0] if stack else ""
    for key, name in (("_multiarray", "numpy"), ("msgpack", "msgpack"), ("ffi", "ctypes/ffi"),
                      ("_ctypes", "ctypes/ffi"), ("libc.so", "libc")):
        if key in leaf:
            return "py: " + name
    if any("futex" in f for f in stack):
        return "py: futex (kernel)"
    if any("sched_yield" in f for f in stack):
        return "py: sched_yield"
    if leaf.startswith(("finish_task_switch", "_raw_spin", "__schedule")):
        return "py: kernel scheduler"
    return "py: interpreter (stub, pb_utils, model.py)"


def go_layer(stack):
    for f in stack:
        for pkg, name in _GO_LAYERS:
            if pkg in f:
                if name == "go: server":
                    if "writeInferResponse" in f or "appendInfer" in f or "appendJSON" in f:
                        return "go: server JSON write"
                    if "parse" in f.lower() or "jsonScanner" in f or "readBody" in f or "addInput" in f:
                        return "go: server JSON parse"
                return name
        if f.startswith(("net/http.", "net.", "internal/poll", "bufio")):
            return "go: net/http + TCP"
        if "gcBgMarkWorker" in f or f.startswith("runtime.gc") or "bgsweep" in f or "bgscavenge" in f:
            return "go: GC"
    if any(f.startswith(_SCHEDULER) for f in stack):
        return "go: runtime scheduler"
    return "go: other"


def main():
    count = collections.Counter()
    for comm, stack in samples(sys.argv[1]):
        count[python_layer(stack) if comm.startswith("python") else go_layer(stack)] += 1
    total = sum(count.values())
    scale = float(sys.argv[2]) if len(sys.argv) > 2 else 0
    for name, n in sorted(count.items()):
        us = "  %6.1f us/req" % (scale * n / total) if scale else ""
        print("%-44s %5.1f%%%s" % (name, 100.0 * n / total, us))
    print("samples", total)


if __name__ == "__main__":
    main()
