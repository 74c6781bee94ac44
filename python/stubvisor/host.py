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
queued for the main thread. Only one thread is ever inside recv.

Memory. Outputs are written into the stub's arena (arena 1): one alloc and
one copy per tensor; the supervisor hands them back with Release. Inputs
are zero-copy views of the supervisor's arena (arena 0). BLS results are
views of arena 0 too, returned with Free once the model drops the last
numpy view of them.
"""

import asyncio
import collections
import ctypes
import functools
import itertools
import json
import os
import platform
import signal
import sys
import threading
import weakref

import numpy as np

import triton_python_backend_utils as pb

from . import ipc
from .clientshm import ClientRegions
from .cuda import CudaRegions
from .loader import StubError, describe, import_model

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
_PoolExhausted = ipc.PoolExhausted

_COMMANDS = frozenset((_K_INITIALIZE, _K_EXECUTE, _K_FINALIZE, _K_IS_READY, _K_AUTO_COMPLETE))

# How long a pumping thread holds the reader lock per read, and how long a
# waiter sleeps before it re-checks (both also bound how late a waiter
# notices that the reader role is free).
_PUMP_SLICE = 0.02
_HEARTBEAT_PERIOD = ipc.HEARTBEAT_PERIOD_MS / 1000
_IS_READY_TIMEOUT = 5.0
_CANCELLED_MAX = 65536
_TEXT_MAX = 16384


def _clip(text, limit=_TEXT_MAX):
    """Keep a text within what one frame carries (a frame holds at most
    half a ring; tracebacks and log lines can be longer)."""
    if len(text) <= limit:
        return text
    return text[:limit] + "... (%d more characters)" % (len(text) - limit)


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


class _Call:
    """One BLS request in flight: the InferResult responses not yet taken."""

    __slots__ = ("host", "id", "queue", "done", "__weakref__")

    def __init__(self, host, call_id):
        self.host = host
        self.id = call_id
        self.queue = collections.deque()
        self.done = False

    def take(self):
        """Wait for the next wire response (pumping the channel)."""
        queue = self.queue
        self.host._wait(lambda: queue)
        return queue.popleft()

    def next_response(self):
        if self.done and not self.queue:
            return None
        wire = self.take()
        if wire[1] & _FINAL:
            self.done = True
        return self.host._bls_response(wire)

    def cancel(self):
        """Ask the supervisor to cancel the request (the callee sees
        is_cancelled()); its responses still arrive, up to the final one."""
        host = self.host
        with host._cond:
            open_ = self.id in host._calls  # its final response has not arrived
        if open_:
            host._send([_K_INFER_CANCEL, self.id])


class _SharedMemoryShim:
    """c_python_backend_utils.shared_memory, which a few Triton test models
    poke; the pool here needs no manual collection."""

    def free_memory(self):
        return None


class Host:
    """Serves one model instance over one channel. It is also the runtime
    triton_python_backend_utils calls into (pb._runtime)."""

    def __init__(self, channel, instance):
        self.ch = channel
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

        self._reader = threading.Lock()
        self._cond = threading.Condition(threading.Lock())
        # Threads asleep on _cond in _wait; the main thread's reads notify
        # only when there are some (a notify costs about a microsecond).
        self._cond_waiters = 0
        self._main_waiting = False
        self._commands = collections.deque()
        self._calls = {}
        self._open_senders = set()  # handles left to a response sender (_left_to_sender)
        self._controls = {}  # ModelControl id -> (error, value) once answered
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
            _K_IS_READY: self._on_is_ready,
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
        threading.Thread(target=self._heartbeat, name="stubvisor-heartbeat", daemon=True).start()
        handlers = self._handlers
        while True:
            msg = self._next_command()
            handler = handlers.get(msg[0])
            try:
                handler(msg)
            except _PeerDead:
                _exit_now(1)
            except Exception as exc:
                self._diag("ERROR", "stub failed to handle message kind %r: %s" % (msg[0], describe(exc)))

    def _heartbeat(self):
        parent = os.getppid()
        while not self._stop.wait(_HEARTBEAT_PERIOD):
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
        while True:
            if commands:
                return commands.popleft()
            self._main_waiting = True
            got = reader.acquire(timeout=_HEARTBEAT_PERIOD)
            self._main_waiting = False
            if not got:
                continue
            msg = None
            try:
                if not commands:
                    msg = self.ch.recv(None)
            except _PeerDead:
                _exit_now(1)
            finally:
                reader.release()
                if self._cond_waiters:
                    with self._cond:
                        self._cond.notify_all()
            if msg is None:
                continue
            if msg[0] in _COMMANDS:
                return msg
            self._dispatch(msg)

    def _dispatch(self, msg):
        """Handle a message read by whoever holds the reader lock."""
        kind = msg[0]
        if kind == _K_RELEASE:
            self._free_owned(msg[2])
        elif kind == _K_CANCEL:
            cancelled = self._cancelled
            if len(cancelled) >= _CANCELLED_MAX:
                cancelled.clear()
            cancelled.add(msg[1])
        elif kind == _K_INFER_RESULT:
            wire = msg[2]
            with self._cond:
                call = self._calls.get(msg[1])
                if call is not None:
                    call.queue.append(wire)
                    if wire[1] & _FINAL:
                        del self._calls[msg[1]]
                    self._cond.notify_all()
            if call is None:
                # Nobody waits for it any more: hand its blocks back.
                for t in wire[3]:
                    if t[3] == _ARENA0 and t[5]:
                        self._pending_free.append(t[4])
        elif kind == _K_CONTROL_RESULT:
            with self._cond:
                if msg[1] in self._controls:
                    self._controls[msg[1]] = (msg[2], msg[3])
                    self._cond.notify_all()
        elif kind == _K_MAP_REGION:
            if len(msg) > 6 and msg[5] is not None:
                self._cuda.map(msg[2], msg[3], msg[4], msg[5], msg[6])
            else:
                self._shm.map(msg[2], msg[3], msg[4])
        elif kind == _K_UNMAP_REGION:
            self._shm.unmap(msg[2])
            self._cuda.unmap(msg[2])
        elif kind == _K_COLLECT_METRICS:
            self._reply(msg[1], None, pb._collect_metrics())
        elif kind in _COMMANDS:
            self._commands.append(msg)
            with self._cond:
                self._cond.notify_all()
        else:
            self._diag("WARNING", "stub ignored a message of unknown kind %r" % (kind,))

    def _wait(self, ready):
        """Block until ready() is true, reading the channel while no other
        thread does. Every wait is a bounded slice; the supervisor's death
        ends the process."""
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
                    msg = self.ch.recv(_PUMP_SLICE)
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
                msg = self.ch.recv(0)
                if msg is None:
                    break
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
    # Sending and memory.

    def _send(self, msg):
        try:
            self.ch.send(msg)
        except _PeerDead:
            _exit_now(1)

    def _free_owned(self, offsets):
        # Only blocks this stub handed out are freed: a repeated or stray
        # offset in a Release must not free a live block.
        owned = self._owned
        free = self.ch.free
        for off in offsets:
            try:
                owned.remove(off)
            except KeyError:
                continue
            free(off)

    def _flush_frees(self):
        pending = self._pending_free
        if not pending:
            return
        offsets = []
        try:
            while True:
                offsets.append(pending.pop())
        except IndexError:
            pass
        self._send([_K_FREE, 0, offsets])

    def _write_tensor(self, tensor, inputs=None):
        """Copy a tensor into arena 1, or into the message when it is
        small, and return its wire descriptor. With inputs (the request's,
        for its final response from execute), an output that is one of
        their arrays as it came is described in place, without a copy."""
        array = tensor._np
        if array is not None and array.nbytes <= _INLINE_MAX and tensor._dtype != _BYTES and array.ndim:
            # The common small output: its bytes travel in the message.
            size = array.nbytes
            if size:
                return [tensor._name, tensor._dtype, list(array.shape), _INLINE, 0, size, array.tobytes()]
            return [tensor._name, tensor._dtype, list(array.shape), _NONE, 0, 0]
        if inputs is not None and array is not None and tensor._dtype != _BYTES:
            off = self._input_offset(inputs, array)
            if off is not None:
                return [tensor._name, tensor._dtype, list(array.shape), _ARENA0, off, array.nbytes]
        data, size, shape = tensor._payload()
        if size == 0:
            return [tensor._name, tensor._dtype, shape, _NONE, 0, 0]
        if size <= _INLINE_MAX:
            return [tensor._name, tensor._dtype, shape, _INLINE, 0, size, bytes(data)]
        off = self.ch.alloc(size)
        self._owned.add(off)
        self._view(_ARENA1, off, size)[:] = data
        return [tensor._name, tensor._dtype, shape, _ARENA1, off, size]

    def _input_offset(self, inputs, array):
        """The arena 0 offset of array's bytes when they lie inside one of
        the request's input blocks, else None."""
        size = array.nbytes
        if not size or not array.flags.c_contiguous:
            return None
        off = self.ch.peer_offset(array.__array_interface__["data"][0], size)
        if off is None:
            return None
        for t in inputs:
            src = t._src
            if src is not None and src[0] == _ARENA0 and src[1] <= off and off + size <= src[1] + src[2]:
                return off
        return None

    def _wire_response(self, request, response, flags, in_place=False):
        """The wire form of one response, outputs pruned to the requested
        ones and written to the pool. A pool that cannot hold them turns
        the response into an error."""
        error = response._error
        if error is not None:
            return [request._handle, flags, [error._code, error._message], [], response._params]
        requested = request._requested
        # Outputs may point at the inputs only in the one response execute
        # returns for a request of a non-decoupled model: the supervisor
        # keeps the inputs until that response is sent.
        inputs = request._inputs if in_place else None
        targets = self._shm_targets.get(request._handle) if self._shm_targets else None
        if targets is not None and flags & _FINAL:
            del self._shm_targets[request._handle]
        outputs = []
        try:
            for t in response._outputs:
                if requested and t._name not in requested:
                    continue
                if targets is not None and t._name in targets:
                    out, error = self._write_client(t, targets[t._name])
                    if error is not None:
                        self._free_owned([o[4] for o in outputs if o[5] and o[3] == _ARENA1])
                        return [request._handle, flags, error, [], ""]
                    outputs.append(out)
                    continue
                outputs.append(self._write_tensor(t, inputs))
        except _PoolExhausted as exc:
            self._free_owned([o[4] for o in outputs if o[5] and o[3] == _ARENA1])
            return [request._handle, flags, [_INTERNAL, "Failed to allocate the response outputs in the shared "
                                             "memory pool: %s" % (exc,)], [], ""]
        except BaseException:
            self._free_owned([o[4] for o in outputs if o[5] and o[3] == _ARENA1])
            raise
        return [request._handle, flags, None, outputs, response._params]

    def _write_client(self, tensor, target):
        """Copy an output straight into the client's region (the one copy
        of a shared-memory output). Returns (descriptor, wire error)."""
        region_id, offset, room = target
        data, size, shape = tensor._payload()
        if size > room:
            return None, [_INTERNAL,
                          "shared memory size specified with the request for output '%s' (%d bytes) should be "
                          "at least %d bytes to hold the results" % (tensor._name, room, size)]
        if size:
            if self._cuda.has(region_id):
                self._cuda.write(region_id, offset, data)
            else:
                self._shm.view(region_id, offset, size)[:] = data
        return [tensor._name, tensor._dtype, shape, _CLIENT, offset, size, region_id], None

    # ------------------------------------------------------------------
    # The runtime interface of triton_python_backend_utils.

    def send_response(self, request, response, flags):
        if response is None:
            wire = [request._handle, flags, None, [], ""]
        else:
            wire = self._wire_response(request, response, flags)
        self._send([_K_RESPONSE, 0, wire])
        if self._open_senders:
            self._open_senders.discard(request._handle)
        if flags & _FINAL:
            self._cancelled.discard(request._handle)

    def is_cancelled(self, handle):
        if handle in self._cancelled:
            return True
        self._drain()
        return handle in self._cancelled

    def model_control(self, op, name, options):
        """Run one operation of the model loading API on the server and
        return its value; a failure raises TritonModelException."""
        call_id = next(self._call_ids)
        controls = self._controls
        with self._cond:
            controls[call_id] = None
        self._send([_K_MODEL_CONTROL, call_id, op, name, options])
        self._wait(lambda: controls[call_id] is not None)
        with self._cond:
            error, value = controls.pop(call_id)
        if error:
            raise pb.TritonModelException(error[1])
        return value

    def bls_allowed(self):
        return self.initialized and not self.finalizing

    def log(self, level, message, filename, line):
        self._send([_K_LOG, 0, level, _clip(message), filename, line])

    def _diag(self, level, message):
        frame = sys._getframe(1)
        self._send([_K_LOG, 0, level, _clip(message), os.path.basename(frame.f_code.co_filename), frame.f_lineno])

    # ------------------------------------------------------------------
    # Commands.

    def _reply(self, msg_id, error, value):
        self._send([_K_RESULT, msg_id, error, value])

    def _load_module(self, model_file):
        if self.module is not None and self.model_file == model_file:
            return self.module
        self.model_file = model_file
        self.model_dir = os.path.dirname(os.path.abspath(model_file))
        self.module = import_model(model_file)
        return self.module

    def _on_auto_complete(self, msg):
        msg_id, options, config_json = msg[1], msg[2], msg[3]
        try:
            module = self._load_module(options["model_file"])
            cls = getattr(module, "TritonPythonModel")
            config = pb.ModelConfig(config_json)
            if hasattr(cls, "auto_complete_config"):
                config = cls.auto_complete_config(config)
            if not isinstance(config, pb.ModelConfig):
                raise StubError("auto_complete_config function in model '" + self.instance
                                + "' must return a valid pb.ModelConfig object.")
            result = json.dumps(config._model_config)
        except Exception as exc:
            text = _clip(describe(exc))
            self._diag("ERROR", "Failed to initialize Python stub for auto-complete: " + text)
            self._reply(msg_id, [_INTERNAL, text], None)
            return
        self._reply(msg_id, None, result)

    def _on_initialize(self, msg):
        msg_id, args, options = msg[1], msg[2], msg[3]
        try:
            self.decoupled = bool(options.get("decoupled", False))
            self.force_cpu = bool(options.get("force_cpu_only_input_tensors", True))
            self.model_name = args.get("model_name", self.instance)
            try:
                self.model_version = int(args.get("model_version", "-1"))
            except ValueError:
                self.model_version = -1
            module = self._load_module(options["model_file"])
            self.model = getattr(module, "TritonPythonModel")()
            # BLS stays refused until initialize has returned, as in Triton
            # ("BLS is only supported during the 'execute' function.").
            if hasattr(self.model, "initialize"):
                self.model.initialize(dict(args))
            self.initialized = True
        except Exception as exc:
            self.model = None
            text = _clip(describe(exc))
            self._diag("ERROR", "Failed to initialize Python stub: " + text)
            self._reply(msg_id, [_INTERNAL, text], None)
            return
        # Tell the supervisor whether readiness requests must ask the model.
        self._reply(msg_id, None, {"is_ready": True} if hasattr(self.model, "is_ready") else None)

    def _on_is_ready(self, msg):
        msg_id = msg[1]
        model = self.model
        check = getattr(model, "is_ready", None) if model is not None else None
        if check is None:
            self._reply(msg_id, None, model is not None)
            return
        try:
            ready = check()
            if asyncio.iscoroutine(ready):
                ready = asyncio.run_coroutine_threadsafe(ready, self._async_loop()).result(_IS_READY_TIMEOUT)
        except Exception as exc:
            text = describe(exc)
            self._diag("ERROR", "is_ready() failed: " + text)
            self._reply(msg_id, [_INTERNAL, text], False)
            return
        if not isinstance(ready, bool):
            text = "is_ready() must return a bool, found type '%s'." % (type(ready),)
            self._diag("ERROR", text)
            self._reply(msg_id, [_INTERNAL, text], False)
            return
        self._reply(msg_id, None, ready)

    def _on_finalize(self, msg):
        self.finalizing = True
        loop = self._aloop
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
        model = self.model
        if model is not None and self.initialized and hasattr(model, "finalize"):
            try:
                model.finalize()
            except Exception as exc:
                self._diag("ERROR", "finalize() failed: " + describe(exc))
        self._stop.set()
        self._flush_frees()
        self._reply(msg[1], None, None)
        _exit_now(0)

    def _async_loop(self):
        loop = self._aloop
        if loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="stubvisor-asyncio", daemon=True).start()
            self._aloop = loop
        return loop

    # ------------------------------------------------------------------
    # Execute: the hot path.

    def _on_execute(self, msg):
        batch_id = msg[1]
        new_input = pb._input_tensor
        new_request = pb._incoming_request
        requests = []
        on_device = None
        for w in msg[2]:
            inputs = [new_input(t[0], t[1], t[2], t[3], t[4] if t[3] < _CLIENT else (t[6], t[4]), t[5])
                      for t in w[4]]
            if len(w) > 8 and w[8]:
                self._shm_targets[w[0]] = {o[0]: (o[1], o[2], o[3]) for o in w[8]}
            for t in w[4]:
                if t[3] == _CUDA:
                    on_device = (on_device or []) + [x for x in inputs if not x.is_cpu()]
                    break
            request = new_request(self, w[0], w[1], w[2], w[3], inputs, w[5], w[6], w[7])
            if len(w) > 9 and w[9]:
                request._trace = pb.InferenceTrace(w[9])
            requests.append(request)
        try:
            if on_device:
                self._inputs_to_host(on_device)
            model = self.model
            if model is None:
                raise StubError("Python model '" + self.instance + "' is not initialized.")
            execute = getattr(model, "execute", None)
            if execute is None:
                raise StubError("Python model " + self.model_file + " does not implement `execute` method.")
            returned = execute(requests)
            # iscoroutine costs an ABC check; the usual list is not one.
            if type(returned) is not list and asyncio.iscoroutine(returned):
                if self.decoupled:
                    future = asyncio.run_coroutine_threadsafe(returned, self._async_loop())
                    future.add_done_callback(functools.partial(self._background_done, requests))
                    returned = None
                else:
                    returned = asyncio.run_coroutine_threadsafe(returned, self._async_loop()).result()
            responses = self._collect(requests, returned)
        except Exception as exc:
            self._fail_batch(batch_id, requests, exc)
            return
        wire = self._wire_response
        in_place = not self.decoupled
        out = []
        try:
            for req, resp in responses:
                out.append(wire(req, resp, _FINAL, in_place))
        except Exception as exc:
            self._free_owned([t[4] for r in out for t in r[3] if t[5] and t[3] == _ARENA1])
            self._fail_batch(batch_id, requests, exc)
            return
        again = [r._handle for r in requests if r._release_flags == pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE]
        pending = None if self.decoupled else self._left_to_sender(requests)
        if pending:
            self._send([_K_EXECUTE_DONE, batch_id, None, out, again, pending])
        elif again:
            self._send([_K_EXECUTE_DONE, batch_id, None, out, again])
        else:
            self._send([_K_EXECUTE_DONE, batch_id, None, out])
        if self._cancelled and not self.decoupled:
            for req in requests:
                self._cancelled.discard(req._handle)
        if self._pending_free:
            self._flush_frees()

    def _left_to_sender(self, requests):
        """The handles of requests (of a model that is not decoupled) that
        execute answered with None while holding their response sender,
        which has sent nothing yet: the response comes later, as in Triton.
        A sender dropped without sending ends its request with an error,
        so no client waits forever."""
        pending = []
        for r in requests:
            state = r._send_state
            if (r._final or state is None or state.closed or state.sent
                    or r._release_flags == pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE):
                continue
            pending.append(r._handle)
            self._open_senders.add(r._handle)
            # A sender holds its request: the request goes when the model
            # holds neither.
            weakref.finalize(r, self._sender_dropped, r._handle)
        return pending

    def _sender_dropped(self, handle):
        if handle in self._open_senders:
            self._open_senders.discard(handle)
            self._send([_K_RESPONSE, 0, [handle, _FINAL, [_INTERNAL, "the response sender of the request was "
                                                              "released without sending a response"], [], ""]])

    def _inputs_to_host(self, tensors):
        """Copy inputs in CUDA memory to host memory: all of them when
        FORCE_CPU_ONLY_INPUT_TENSORS is yes, BYTES ones always (as Triton)."""
        for t in tensors:
            if not self.force_cpu and t._dtype != _BYTES:
                continue
            _, (region_id, offset), size = t._src
            data = self._cuda.read(region_id, offset, size)
            if t._dtype == _BYTES:
                array = pb.deserialize_bytes_tensor(data).reshape(t._shape)
            else:
                array = np.frombuffer(data, dtype=pb._WIRE_DTYPE[t._dtype]).reshape(t._shape)
            t._np = array
            t._src = None

    def _collect(self, requests, returned):
        """Check what execute returned (Triton's rules and texts) and pair
        each response with its request."""
        if returned is None:
            return ()
        if self.decoupled:
            raise StubError("Python model '" + self.instance
                            + "' is using the decoupled mode and the execute function must return None.")
        if not isinstance(returned, list):
            raise StubError("Expected a list in the execute return, found type '" + str(type(returned)) + "'.")
        if len(returned) != len(requests):
            raise StubError(
                "Number of InferenceResponse objects do not match the number of InferenceRequest objects. "
                "InferenceRequest(s) size is:%d, and InferenceResponse(s) size is:%d\n" % (len(requests), len(returned)))
        pairs = []
        response_type = pb.InferenceResponse
        for req, resp in zip(requests, returned):
            if resp is None:
                continue
            if req._release_flags == pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
                raise StubError("Expected a None object in the execute function return list for reschduled "
                                "request, found type '" + str(type(resp)) + "'.")
            if not isinstance(resp, response_type):
                raise StubError("Expected an 'InferenceResponse' object in the execute function return list, "
                                "found type '" + str(type(resp)) + "'.")
            if req._send_state is not None:
                req.get_response_sender()._update(resp, _FINAL)
            req._final = True
            pairs.append((req, resp))
        return pairs

    def _batch_error_text(self, exc):
        return _clip("Failed to process the request(s) for model '" + self.instance + "', message: " + describe(exc))

    def _fail_batch(self, batch_id, requests, exc):
        text = self._batch_error_text(exc)
        self._diag("ERROR", text)
        # The supervisor fails every request without a final response; no
        # more responses may be sent for them.
        for req in requests:
            req._final = True
            self._shm_targets.pop(req._handle, None)
            state = req._send_state
            if state is not None:
                with state.lock:
                    state.closed = True
        self._send([_K_EXECUTE_DONE, batch_id, [_INTERNAL, text], []])
        for req in requests:
            self._cancelled.discard(req._handle)

    def _background_done(self, requests, future):
        """An async decoupled execute finished on the loop thread. If it
        raised, log it and end every request it left open with the error."""
        if future.cancelled():
            return
        exc = future.exception()
        if exc is None:
            return
        text = self._batch_error_text(exc)
        self._diag("ERROR", text)
        for req in requests:
            response = pb.InferenceResponse(error=pb.TritonError(text))
            try:
                req.get_response_sender()._update(response, _FINAL)
            except pb.TritonModelException:
                continue  # the model already sent its final response
            self.send_response(req, response, _FINAL)

    # ------------------------------------------------------------------
    # BLS.

    def bls(self, request, decoupled):
        call_id = next(self._call_ids)
        inputs = []
        try:
            for t in request._inputs:
                inputs.append(self._write_tensor(t))
        except _PoolExhausted as exc:
            self._free_owned([i[4] for i in inputs if i[5] and i[3] == _ARENA1])
            # Triton answers with an error response, not an exception.
            call = _Call(self, call_id)
            call.queue.append([0, _FINAL, [_INTERNAL, "Failed to increase the shared memory pool size for the BLS "
                                           "request inputs: %s" % (exc,)], [], ""])
            if decoupled:
                return pb._response_iterator(call)
            return self._bls_response(call.queue.popleft())
        wire = [call_id, request._id, request._correlation_id, request._flags, inputs,
                request._requested, request._params, request._timeout]
        trace = getattr(request._trace, "_context", "")
        if trace:
            wire += [None, trace]  # no output targets, then the trace context
        call = _Call(self, call_id)
        with self._cond:
            self._calls[call_id] = call
        self._send([_K_INFER_EXEC, call_id, request._model_name, request._model_version, wire, decoupled])
        if decoupled:
            iterator = pb._response_iterator(call)
            weakref.finalize(iterator, self._drop_call, call_id)
            return iterator
        result = None
        while True:
            wire = call.take()
            response = self._bls_response(wire)
            if result is None or response._outputs or response._error is not None:
                result = response
            if wire[1] & _FINAL:
                return result

    def _drop_call(self, call_id):
        with self._cond:
            call = self._calls.pop(call_id, None)
        if call is not None:
            while call.queue:
                for t in call.queue.popleft()[3]:
                    if t[3] == _ARENA0 and t[5]:
                        self._pending_free.append(t[4])

    def _bls_response(self, wire):
        """An InferenceResponse over a wire response whose outputs live in
        arena 0: zero-copy numpy views, handed back with Free once the
        model drops them (BYTES are copied out and handed back at once)."""
        outputs = []
        pending = self._pending_free
        for t in wire[3]:
            # Readers ignore trailing elements they do not know.
            name, dtype, shape, loc, off, size = t[0], t[1], t[2], t[3], t[4], t[5]
            if size == 0:
                array = np.empty(shape, dtype=object if dtype == pb._BYTES else pb._WIRE_DTYPE[dtype])
            elif dtype == pb._BYTES:
                array = pb.deserialize_bytes_tensor(self._view(loc, off, size)).reshape(shape)
                if loc == _ARENA0:
                    pending.append(off)
            else:
                view = self._view(loc, off, size)
                address = ctypes.addressof(ctypes.c_char.from_buffer(view))
                keep, array = pb._foreign_array(address, shape, pb._WIRE_DTYPE[dtype], view)
                if loc == _ARENA0:
                    weakref.finalize(keep, pending.append, off)
            outputs.append(pb._tensor_from_array(name, dtype, array))
        response = pb.InferenceResponse.__new__(pb.InferenceResponse)
        response._outputs = outputs
        error = wire[2]
        response._error = pb.TritonError(error[1], error[0]) if error else None
        response._params = wire[4] if len(wire) > 4 and wire[4] else ""
        response._release = None
        return response


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
