"""The stub host: runs one model instance for the supervisor.

It attaches to the region the supervisor passed as fd 3, says Hello, and
serves the commands of ipc/messages.go: AutoComplete, Initialize, Execute,
IsReady, Finalize, plus Release, Cancel and InferResult.

Reading design. There is no reader thread: a cross-thread hand-off costs
10-20 us in CPython, more than the whole execute budget. The main thread
reads the ring itself while idle. Code that needs a message while execute
runs (is_cancelled(), a BLS call waiting for its InferResult, possibly on
another thread) "pumps": it takes the reader lock, reads, and dispatches:
Release, Cancel and InferResult are handled on the spot, commands are
queued for the main thread before the lock goes (_hand_over). Only one
thread is ever inside recv. The asyncio loop of async execute pumps too,
from its selector, while its async_exec calls are open (bls.py, BLSLoop);
in a decoupled model the main thread then leaves the channel to it
(_await_loop).

Memory. Outputs are written into the stub's arena (arena 1): one alloc and
one copy per tensor (at most 1 KiB: in the message instead); the
supervisor hands them back with Release. Inputs are zero-copy views of the
supervisor's arena (arena 0), except those of at most 1 KiB, which come in
the Execute message (as_numpy copies them into a writable bytearray). BLS
results are views of arena 0 too, returned with Free once the model drops
the last numpy view of them.
"""

import collections
import itertools
import os
import platform
import signal
import sys
import threading

import numpy as np

import triton_python_backend_utils as pb

from . import ipc, native
from .clientshm import ClientRegions
from .common import (
    _FORKED,
    _CANCELLED_MAX,
    _CLIENT,
    _COMMANDS,
    _CUDA,
    _FINAL,
    _BUSY_PERIOD,
    _HEARTBEAT_PERIOD,
    _IDLE_WAIT,
    _K_AUTO_COMPLETE,
    _K_CANCEL,
    _K_COLLECT_METRICS,
    _K_CONTROL_RESULT,
    _K_EXECUTE,
    _K_FINALIZE,
    _K_HELLO,
    _K_INFER_RESULT,
    _K_INITIALIZE,
    _K_IS_READY,
    _K_MAP_REGION,
    _K_RELEASE,
    _K_UNMAP_REGION,
    _PUMP_SLICE,
    _PeerDead,
    _exit_now,
)
from .fields import (
    CONTROL_RESULT_ERROR,
    CONTROL_RESULT_VALUE,
    INFER_RESULT_RESPONSE,
    MAP_CUDA_HANDLE,
    MAP_DEVICE_ID,
    MAP_OFFSET,
    MAP_REGION_ID,
    MAP_SIZE,
    M_ID,
    M_KIND,
    RELEASE_OFFSETS,
    RS_FLAGS,
    UNMAP_REGION_ID,
)
from .cuda import CudaRegions
from .loader import describe
from .bls import BLSMixin
from .execute import ExecuteMixin
from .lifecycle import LifecycleMixin
from .responses import ResponsesMixin


class _SharedMemoryShim:
    """c_python_backend_utils.shared_memory, which a few Triton test models
    poke; the pool here needs no manual collection."""

    def free_memory(self):
        return None


class Host(LifecycleMixin, ExecuteMixin, ResponsesMixin, BLSMixin):
    """Serves one model instance over one channel. It is also the runtime
    triton_python_backend_utils calls into (pb._runtime).

    Host itself holds the state and reads the channel; each job is a mixin
    in a module of its own, as on the Go side: lifecycle.py (the commands
    around execute), execute.py (the hot path), responses.py (outputs,
    response senders, memory) and bls.py (calls to other models)."""

    def __init__(self, channel, instance):
        self.ch = channel
        # The heartbeat thread checks the parent every beat (and Pdeathsig
        # ends the stub with it): the idle wait for a command need not
        # wake to look; the reaper's futex wake ends it at once.
        channel.idle_slice = _IDLE_WAIT
        # The process that owns the channel. A process the model forks
        # (multiprocessing with fork) inherits the mapping of the rings and
        # arenas but must never use them: the supervisor sees one stub.
        self._owner_pid = os.getpid()
        # The bytes of small tensors one message may carry inline (a
        # quarter of a frame, as the supervisor allows its Execute): the
        # rest of a batch's small outputs go through arena 1.
        self._inline_room = channel.max_frame // 4
        self.instance = instance
        self.model_dir = ""
        self.model_name = instance
        self.model_version = -1
        self.decoupled = False
        self.model = None
        self.module = None
        self.model_file = ""
        self.initialized = False
        self.finalizing = False

        # Whoever reads the channel holds its own recv lock (and calls
        # recv_held): one lock a message.
        self._reader = channel.recv_lock
        self._cond = threading.Condition(threading.Lock())
        # Threads asleep on _cond in _wait; the main thread's reads notify
        # only when there are some (a notify costs about a microsecond).
        self._cond_waiters = 0
        self._main_waiting = False
        # The heartbeat thread's view of the main thread: idle while it
        # waits for a command, taken counts the commands it took, and
        # _beat_long is set while the heartbeat thread sleeps a whole
        # idle period (a command taken then wakes it: _took).
        self._idle = False
        self._taken = 0
        self._beat_long = False
        self._beat_wake = threading.Event()
        self._commands = collections.deque()
        self._calls = {}
        self._open_senders = set()  # handles left to a response sender (_left_to_sender)
        self._controls = {}  # ModelControl id -> (error, value) once answered
        # async_exec calls in flight (bls.py, bls_async), and the pump
        # thread that reads for them, started with the first.
        self._async_open = 0
        self._async_ready = {}  # event loop -> its calls whose final response is in
        self._loop_reading = False  # a BLSLoop's thread dispatches what it read (bls.py)
        # A decoupled model's BLSLoop: while its async_exec calls are open,
        # its thread reads the channel and the main thread waits for
        # commands instead (_next_command), so that answers reach the loop
        # without a hand-off.
        self._loop_reads = False
        self._main_wake = threading.Event()  # set for such a main thread: a command, or the calls ended
        self._pump_started = False
        self._pump_wake = threading.Event()
        self._call_ids = itertools.count(1)
        self._cancelled = set()
        self._owned = set()
        self._pending_free = []
        self._aloop = None
        self._stop = threading.Event()
        self._shm = ClientRegions()
        self._cuda = CudaRegions()
        self.force_cpu = True  # FORCE_CPU_ONLY_INPUT_TENSORS
        self._shm_targets = {}  # request handle -> {output name: (region_id, offset, size)}
        ch_view = channel.view
        shm_view = self._shm.view
        cuda_read = self._cuda.read

        def view(loc, offset, size):
            # A LOC_CLIENT or LOC_CUDA tensor carries (region_id, offset) as
            # its offset. CUDA memory is read through a host copy.
            if loc == _CLIENT:
                return shm_view(offset[0], offset[1], size)
            if loc == _CUDA:
                return memoryview(cuda_read(offset[0], offset[1], size))
            return ch_view(loc, offset, size)

        self._view = view

        self._handlers = {
            _K_EXECUTE: self._on_execute,
            _K_INITIALIZE: self._on_initialize,
            _K_FINALIZE: self._on_finalize,
            _K_AUTO_COMPLETE: self._on_auto_complete,
        }

    # ------------------------------------------------------------------
    # Life cycle.

    def serve(self):
        """Say Hello, start the heartbeat, and serve commands until
        Finalize (which exits the process) or the supervisor's death."""
        pb._runtime = self
        pb._view = self._view
        pb._cuda = self._cuda
        self._send([_K_HELLO, 0, ipc.PROTOCOL_VERSION, os.getpid(),
                    {"python": platform.python_version(), "numpy": np.__version__}])
        # One verbose line: whether the compiled fast path serves (native.py).
        self._diag("VERBOSE", "stub: " + native.REASON)
        threading.Thread(target=self._heartbeat, name="stubvisor-heartbeat", daemon=True).start()
        handlers = self._handlers
        while True:
            msg = self._next_command()
            handler = handlers.get(msg[M_KIND])
            try:
                handler(msg)
            except _PeerDead:
                _exit_now(1)
            except Exception as exc:
                self._diag("ERROR", "stub failed to handle message kind %r: %s" % (msg[M_KIND], describe(exc)))

    def _heartbeat(self):
        parent = os.getppid()
        wake = self._beat_wake
        taken = -1
        while True:
            # Sleep the long idle period only once the main thread has
            # waited for a command through a whole busy period: under load
            # nobody wakes this thread, and a stub that went idle costs
            # one beat per idle period.
            self._beat_long = True
            long_ = self._idle and self._taken == taken
            self._beat_long = long_
            taken = self._taken
            wake.wait(_HEARTBEAT_PERIOD if long_ else _BUSY_PERIOD)
            self._beat_long = False
            wake.clear()
            if self._stop.is_set():
                return
            # A dead mark whose wake-up came just before the main thread's
            # futex wait leaves that wait asleep for its whole slice: the
            # beat looks at the mark too, so the stub leaves within a beat.
            if self.ch.marked_dead():
                _exit_now(1)
            try:
                self.ch.beat()
                self._flush_frees()
                # While execute runs, nobody else may be reading: answer
                # metric scrapes and take releases now and then.
                self._drain()
            except _PeerDead:
                _exit_now(1)
            if os.getppid() != parent:
                _exit_now(1)

    # ------------------------------------------------------------------
    # Reading.

    def _next_command(self):
        """Return the next command for the main thread, reading the ring
        itself and handling everything else on the way."""
        commands = self._commands
        reader = self._reader
        ch = self.ch
        writer_sleeping = ch.writer_sleeping
        self._idle = True
        while True:
            if commands:
                return self._took(commands.popleft())
            if self._loop_reads and self._async_open:
                self._await_loop()
                continue
            # Positional arguments, and the untimed try first: keywords and
            # a timed acquire cost about 1.5k instructions more. Pumping
            # threads leave the lock to the main thread while it waits
            # for it (_main_waiting).
            if not reader.acquire(False):
                self._main_waiting = True
                got = reader.acquire(True, _BUSY_PERIOD)
                self._main_waiting = False
                if not got:
                    continue
            msg = None
            try:
                if not commands:
                    msg = ch.recv_held(None, False)
            except _PeerDead:
                _exit_now(1)
            finally:
                reader.release()
                # The release fenced the head recv_held stored.
                if writer_sleeping.value:
                    ch.wake_writer()
                if self._cond_waiters:
                    with self._cond:
                        self._cond.notify_all()
            if msg is None:
                continue
            if msg[M_KIND] in _COMMANDS:
                # _took, inlined: this is every request's path.
                self._idle = False
                self._taken += 1
                if self._beat_long:
                    self._beat_wake.set()
                return msg
            self._dispatch(msg)

    def _await_loop(self):
        """The main thread of a decoupled model whose event loop reads
        the channel (its async_exec calls are open): wait until a command
        is handed over or the calls end, a busy period at most."""
        wake = self._main_wake
        wake.clear()
        if not self._commands and self._async_open:
            wake.wait(_BUSY_PERIOD)

    def _took(self, msg):
        """Note that the main thread took a command (it is busy now), and
        wake the heartbeat thread if it sleeps an idle period."""
        self._idle = False
        self._taken += 1
        if self._beat_long:
            self._beat_wake.set()
        return msg

    def _hand_over(self, msg):
        """For a thread other than the main one, with the reader lock
        held: queue a command for the main thread before the lock goes
        (None), or return msg for _dispatch after it. The main thread
        looks at its queue under the lock and then sleeps on the ring
        until the next message: a command queued after that look would
        wait for a message that may never come."""
        if msg[M_KIND] in _COMMANDS:
            self._commands.append(msg)
            if self._loop_reads:
                self._main_wake.set()
            return None
        return msg

    def _dispatch(self, msg):
        """Handle a message that is not a command, read by whoever holds
        the reader lock (commands go to the main thread: _next_command
        returns those it reads, _hand_over queues the others')."""
        kind = msg[M_KIND]
        if kind == _K_RELEASE:
            self._free_owned(msg[RELEASE_OFFSETS])
        elif kind == _K_CANCEL:
            cancelled = self._cancelled
            if len(cancelled) >= _CANCELLED_MAX:
                cancelled.clear()
            cancelled.add(msg[M_ID])
        elif kind == _K_INFER_RESULT:
            wire = msg[INFER_RESULT_RESPONSE]
            with self._cond:
                call = self._calls.get(msg[M_ID])
                if call is not None:
                    call.queue.append(wire)
                    if wire[RS_FLAGS] & _FINAL:
                        del self._calls[msg[M_ID]]
                        if call.waker is not None:
                            self._async_done(call)  # bls.py: its loop takes it
                    self._cond.notify_all()
            if call is None:
                self._return_blocks(wire)  # nobody waits for it any more
        elif kind == _K_CONTROL_RESULT:
            with self._cond:
                if msg[M_ID] in self._controls:
                    self._controls[msg[M_ID]] = (msg[CONTROL_RESULT_ERROR], msg[CONTROL_RESULT_VALUE])
                    self._cond.notify_all()
        elif kind == _K_MAP_REGION:
            if len(msg) > MAP_DEVICE_ID and msg[MAP_CUDA_HANDLE] is not None:
                self._cuda.map(msg[MAP_REGION_ID], msg[MAP_OFFSET], msg[MAP_SIZE], msg[MAP_CUDA_HANDLE], msg[MAP_DEVICE_ID])
            else:
                self._shm.map(msg[MAP_REGION_ID], msg[MAP_OFFSET], msg[MAP_SIZE])
        elif kind == _K_UNMAP_REGION:
            self._shm.unmap(msg[UNMAP_REGION_ID])
            self._cuda.unmap(msg[UNMAP_REGION_ID])
        elif kind == _K_COLLECT_METRICS:
            self._reply(msg[M_ID], None, pb._collect_metrics())
        elif kind == _K_IS_READY:
            # The supervisor asks one instance once at a time.
            threading.Thread(target=self._on_is_ready, args=(msg,), name="stubvisor-is-ready", daemon=True).start()
        else:
            self._diag("WARNING", "stub ignored a message of unknown kind %r" % (kind,))

    def _wait(self, ready):
        """Block until ready() is true, reading the channel while no other
        thread does. Every wait is a bounded slice; the supervisor's death
        ends the process."""
        self._check_owner("Waiting for the server")
        cond = self._cond
        reader = self._reader
        while True:
            with cond:
                if ready():
                    return
            if not self._main_waiting and reader.acquire(blocking=False):
                msg = None
                try:
                    with cond:
                        if ready():
                            return
                    msg = self.ch.recv_held(_PUMP_SLICE)
                    if msg is not None:
                        msg = self._hand_over(msg)
                except _PeerDead:
                    _exit_now(1)
                finally:
                    reader.release()
                if msg is not None:
                    self._dispatch(msg)
                with cond:
                    cond.notify_all()
                continue
            with cond:
                if not ready():
                    self._cond_waiters += 1
                    try:
                        cond.wait(_PUMP_SLICE)
                    finally:
                        self._cond_waiters -= 1

    def _drain(self):
        """Handle whatever is already queued, if no other thread reads."""
        reader = self._reader
        if self._main_waiting or not reader.acquire(blocking=False):
            return
        msgs = []
        try:
            while True:
                msg = self.ch.recv_held(0)
                if msg is None:
                    break
                msg = self._hand_over(msg)
                if msg is not None:
                    msgs.append(msg)
        except _PeerDead:
            _exit_now(1)
        finally:
            reader.release()
        for msg in msgs:
            self._dispatch(msg)
        with self._cond:
            self._cond.notify_all()

    # ------------------------------------------------------------------
    # Sending.

    def _check_owner(self, what):
        """Raise a clear error when called from a process the model forked
        instead of touching the stub's rings and arenas. The pid is looked
        up only after a fork (getpid is a system call, and every message
        sent passes here)."""
        if _FORKED and os.getpid() != self._owner_pid:
            raise pb.TritonModelException(
                "%s is not supported in a process forked from the model's stub (pid %d, the stub is pid %d): "
                "a forked child shares the stub's shared memory and must not use it; make the call in the stub's "
                "own process (execute), or start the child with multiprocessing's 'spawn' method"
                % (what, os.getpid(), self._owner_pid))

    def _send(self, msg):
        self._check_owner("Talking to the server")
        try:
            self.ch.send(msg)
        except _PeerDead:
            _exit_now(1)

    def _send_frame(self, data):
        """_send of a message already encoded (fastwire)."""
        self._check_owner("Talking to the server")
        try:
            self.ch.send_frame(data)
        except _PeerDead:
            _exit_now(1)


def _install_c_module():
    """Register c_python_backend_utils, the name Triton's native half goes
    by, for the few models that import it directly."""
    import types

    module = types.ModuleType("c_python_backend_utils")
    for name in ("TritonError", "TritonModelException", "Tensor", "InferenceRequest", "InferenceResponse",
                 "InferenceResponseSender", "ResponseIterator", "Logger", "PreferredMemory", "InferenceTrace",
                 "MetricFamily", "Metric", "MetricKind", "MemoryType", "load_model", "unload_model",
                 "is_model_ready", "TRITONSERVER_MEMORY_GPU", "TRITONSERVER_MEMORY_CPU"):
        setattr(module, name, getattr(pb, name))
    module.shared_memory = _SharedMemoryShim()
    sys.modules.setdefault("c_python_backend_utils", module)


def _drop_signal(signum, frame):
    """SIGINT and SIGTERM reach the stub to no effect (see main)."""


def _default_signals():
    """In a child the model forked: SIGINT and SIGTERM act as usual again."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def main():
    """Entry point of ``python -m stubvisor``."""
    # The supervisor owns the life cycle: Finalize, then SIGKILL. SIGINT and
    # SIGTERM are caught and dropped rather than ignored: a program the model
    # starts gets the default dispositions back on exec (an ignored signal
    # would stay ignored), and a child it forks restores them at once, so
    # the model can still stop its helpers.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _drop_signal)
    os.register_at_fork(after_in_child=_default_signals)
    # `-m` put the working directory first on sys.path; Triton's stub has
    # no such entry, and a stray directory there could shadow a model.
    cwd = os.getcwd()
    if sys.path and sys.path[0] in ("", cwd):
        del sys.path[0]
    # stdout/stderr are pipes to the supervisor's log: flush per line.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True)
        except (AttributeError, ValueError):
            pass
    _install_c_module()
    try:
        channel = ipc.Channel.attach(ipc.REGION_FD)
    except Exception as exc:
        sys.stderr.write("stubvisor stub: cannot attach to the region on fd %d: %s\n" % (ipc.REGION_FD, exc))
        return 2
    Host(channel, os.environ.get(ipc.INSTANCE_ENV, "")).serve()
    return 0
