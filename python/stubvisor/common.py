"""What the stub host's modules share: the wire constants they use, bound as
module globals (a global is cheaper to load than ipc.X on the hot path),
the host's time bounds, and two helpers."""

import os
import sys

import triton_python_backend_utils as pb

from . import ipc

# Not empty in a child forked from this process: only then can a caller of
# Host._check_owner be in another process than the Host's (getpid is a
# system call, and every message sent passes there).
_FORKED = []
os.register_at_fork(after_in_child=lambda: _FORKED.append(True))

_FINAL = pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL
_INTERNAL = pb.TritonError.INTERNAL

_K_INITIALIZE = ipc.KIND_INITIALIZE
_K_EXECUTE = ipc.KIND_EXECUTE
_K_FINALIZE = ipc.KIND_FINALIZE
_K_RELEASE = ipc.KIND_RELEASE
_K_CANCEL = ipc.KIND_CANCEL
_K_IS_READY = ipc.KIND_IS_READY
_K_AUTO_COMPLETE = ipc.KIND_AUTO_COMPLETE
_K_INFER_RESULT = ipc.KIND_INFER_RESULT
_K_HELLO = ipc.KIND_HELLO
_K_RESULT = ipc.KIND_RESULT
_K_RESPONSE = ipc.KIND_RESPONSE
_K_EXECUTE_DONE = ipc.KIND_EXECUTE_DONE
_K_LOG = ipc.KIND_LOG
_K_INFER_EXEC = ipc.KIND_INFER_EXEC
_K_FREE = ipc.KIND_FREE
_K_INFER_CANCEL = ipc.KIND_INFER_CANCEL
_K_MODEL_CONTROL = ipc.KIND_MODEL_CONTROL
_K_CONTROL_RESULT = ipc.KIND_CONTROL_RESULT
_ARENA0 = ipc.LOC_ARENA0
_ARENA1 = ipc.LOC_ARENA1
_NONE = ipc.LOC_NONE
_CLIENT = ipc.LOC_CLIENT
_INLINE = ipc.LOC_INLINE
_INLINE_MAX = ipc.INLINE_MAX
_CUDA = ipc.LOC_CUDA
_BYTES = 13  # backendapi.TypeBytes: always handed to the model in host memory
_K_MAP_REGION = ipc.KIND_MAP_REGION
_K_UNMAP_REGION = ipc.KIND_UNMAP_REGION
_K_COLLECT_METRICS = ipc.KIND_COLLECT_METRICS
_PeerDead = ipc.PeerDead
_FrameTooLarge = ipc.FrameTooLarge
_PoolExhausted = ipc.PoolExhausted

# The commands the main thread runs in order. IsReady is not one: it runs
# on a thread of its own (Host._dispatch), as Triton's stub runs is_ready()
# beside execute, so a slow check holds up no request.
_COMMANDS = frozenset((_K_INITIALIZE, _K_EXECUTE, _K_FINALIZE, _K_AUTO_COMPLETE))

# How long a pumping thread holds the reader lock per read, and how long a
# waiter sleeps before it re-checks (both also bound how late a waiter
# notices that the reader role is free).
_PUMP_SLICE = 0.02


def _heartbeat_period():
    try:
        ms = int(os.environ.get(ipc.HEARTBEAT_ENV, ""))
    except ValueError:
        ms = 0
    return (ms if ms > 0 else ipc.HEARTBEAT_PERIOD_MS) / 1000


# The heartbeat thread runs every _BUSY_PERIOD while the stub works (it
# also answers metric scrapes and takes releases during a long execute),
# and beats every _HEARTBEAT_PERIOD (the supervisor's choice, derived
# from --stub-heartbeat-timeout) while it is idle.
_BUSY_PERIOD = ipc.HEARTBEAT_PERIOD_MS / 1000
_HEARTBEAT_PERIOD = max(_BUSY_PERIOD, _heartbeat_period())
# How long the main thread's idle wait for a command sleeps between its
# own checks of the parent (the heartbeat thread makes them every beat).
_IDLE_WAIT = 10.0
_CANCELLED_MAX = 65536
_TEXT_MAX = 16384


def _clip(text, limit=_TEXT_MAX):
    """Keep a text within what one frame carries (a frame holds at most
    half a ring; tracebacks and log lines can be longer)."""
    if len(text) <= limit:
        return text
    return text[:limit] + "... (%d more characters)" % (len(text) - limit)


# _EXIT_OVER_MEMORY is the exit status of a stub whose allocation failed
# under the memory limit the supervisor set on it with setrlimit (the
# environment names it, STUBVISOR_MEMORY_RLIMIT); the supervisor reports
# the exit as "over memory limit". Under a cgroup limit the kernel kills
# the stub instead.
_EXIT_OVER_MEMORY = 86


def _over_memory(exc):
    """Exit as over the memory limit when exc is the MemoryError of an
    allocation the supervisor's limit refused; otherwise return."""
    if isinstance(exc, MemoryError) and os.environ.get("STUBVISOR_MEMORY_RLIMIT"):
        sys.stderr.write("stub: MemoryError under the memory limit of %s bytes\n"
                         % os.environ["STUBVISOR_MEMORY_RLIMIT"])
        _exit_now(_EXIT_OVER_MEMORY)


def _exit_now(code):
    """Leave at once: flush what the model printed, skip interpreter
    teardown (the supervisor owns the region; other threads may be in
    user code)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)
