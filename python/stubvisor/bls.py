"""BLS calls and the model loading API: requests this stub sends to the
supervisor, and the answers it waits for. The Python side of
supervisor/bls.go and modelctl.go."""

import asyncio
import collections
import ctypes
import selectors
import threading
import weakref

import numpy as np

import triton_python_backend_utils as pb

from .common import (
    _ARENA0,
    _ARENA1,
    _FINAL,
    _INLINE,
    _INTERNAL,
    _K_INFER_CANCEL,
    _K_INFER_EXEC,
    _K_MODEL_CONTROL,
    _PUMP_SLICE,
    _PeerDead,
    _PoolExhausted,
    _exit_now,
)
from .fields import (
    E_CODE,
    E_MESSAGE,
    RS_ERROR,
    RS_FLAGS,
    RS_OUTPUTS,
    RS_PARAMETERS_JSON,
    T_DATA,
    T_DATA_TYPE,
    T_LOC,
    T_NAME,
    T_OFFSET,
    T_SHAPE,
    T_SIZE,
)


class _Call:
    """One BLS request in flight: the InferResult responses not yet taken."""

    __slots__ = ("host", "id", "queue", "done", "waker", "__weakref__")

    def __init__(self, host, call_id):
        self.host = host
        self.id = call_id
        self.queue = collections.deque()
        self.done = False
        # (loop, future) of an async_exec call: the reader that takes the
        # final response resolves the future on the loop (see bls_async).
        self.waker = None

    def take(self):
        """Wait for the next wire response (pumping the channel)."""
        queue = self.queue
        self.host._wait(lambda: queue)
        return queue.popleft()

    def next_response(self):
        if self.done and not self.queue:
            return None
        wire = self.take()
        if wire[RS_FLAGS] & _FINAL:
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


class BLSMixin:
    """The part of Host that calls other models."""

    def model_control(self, op, name, options):
        """Run one operation of the model loading API on the server and
        return its value; a failure raises TritonModelException."""
        self._check_owner("The model loading API")
        call_id = next(self._call_ids)
        controls = self._controls
        with self._cond:
            controls[call_id] = None
        self._send([_K_MODEL_CONTROL, call_id, op, name, options])
        self._wait(lambda: controls[call_id] is not None)
        with self._cond:
            error, value = controls.pop(call_id)
        if error:
            raise pb.TritonModelException(error[E_MESSAGE])
        return value

    def bls(self, request, decoupled):
        self._check_owner("BLS")
        call = self._send_call(request, decoupled, None)
        if type(call) is not _Call:
            return call  # the inputs did not fit: an error response
        if decoupled:
            call_id = call.id
            iterator = pb._response_iterator(call)
            weakref.finalize(iterator, self._drop_call, call_id)
            # As in Triton, exec returns once the first response is in: in
            # async_exec that wait runs on an executor thread, so the
            # model's event loop stays free while the callee works, and
            # iterating a one-response stream never blocks the loop.
            queue = call.queue
            self._wait(lambda: queue)
            return iterator
        result = None
        while True:
            wire = call.take()
            response = self._bls_response(wire)
            if result is None or response._outputs or response._error is not None:
                result = response
            if wire[RS_FLAGS] & _FINAL:
                return result

    def bls_async(self, request, loop):
        """async_exec of a call that is not decoupled: the call is sent
        from the event loop's thread, and the future it returns is
        resolved there once the final response is in (no executor thread
        per call). The main thread does not read meanwhile (it waits for
        the coroutine, or in a decoupled model for a command the loop
        hands over: _await_loop), so the loop's thread reads the channel
        itself while it has nothing else to do (BLSLoop); on a loop of the
        model's own, the stub's pump thread reads."""
        self._check_owner("BLS")
        future = loop.create_future()
        call = self._send_call(request, False, (loop, future))
        if type(call) is not _Call:
            future.set_result(call)
            return future
        if type(loop) is not BLSLoop:
            self._pump_wake.set()  # a loop of the model's own: the pump reads
        return future

    def _async_done(self, call):
        """The final response of an async_exec call is in (the reader
        holds _cond): its loop resolves it, with the others that end
        before it runs (one wake-up of the loop for them all)."""
        loop = call.waker[0]
        ready = self._async_ready.get(loop)
        if ready is not None:
            ready.append(call)
            return
        self._async_ready[loop] = [call]
        if asyncio._get_running_loop() is loop:
            # On the loop's thread: no wake-up to send, and none at all
            # when _loop_read read it (it resolves what it read).
            if not self._loop_reading:
                loop.call_soon(self._resolve_ready, loop)
            return
        try:
            loop.call_soon_threadsafe(self._resolve_ready, loop)
        except RuntimeError:
            # The loop was closed: nobody awaits the call any more.
            del self._async_ready[loop]
            self._async_open -= 1
            while call.queue:
                self._return_blocks(call.queue.popleft())

    def _resolve_ready(self, loop):
        """On the event loop: resolve the futures of the async_exec calls
        whose final response came in, each with its result (as bls's loop
        builds it)."""
        with self._cond:
            calls = self._async_ready.pop(loop, ())
            self._async_open -= len(calls)
            if not self._async_open and self._loop_reads:
                self._main_wake.set()  # the main thread reads again (_await_loop)
        for call in calls:
            future = call.waker[1]
            result = None
            for wire in call.queue:
                response = self._bls_response(wire)
                if result is None or response._outputs or response._error is not None:
                    result = response
            call.queue.clear()
            if not future.cancelled():
                future.set_result(result)

    def _pump(self):
        """The pump thread: reads the channel while async_exec calls are
        open (bls_async), for a main thread that waits for its coroutine
        without reading."""
        wake = self._pump_wake
        while True:
            wake.wait()
            wake.clear()
            self._wait(lambda: not self._async_open)

    def _loop_read(self, loop, timeout):
        """On the thread of BLSLoop loop, with async_exec calls open: wait
        up to timeout seconds (None: a slice) for the channel and handle
        what came, so the answers reach their coroutines without a pump
        thread's wake-up and a self-pipe's. False when another thread
        reads the channel (it hands the answers over as the pump does)."""
        reader = self._reader
        if self._main_waiting or not reader.acquire(False):
            return False
        wait = _PUMP_SLICE if timeout is None or timeout > _PUMP_SLICE else timeout
        ch = self.ch
        msgs = []
        try:
            if ch.wait_message(wait):
                # recv_held only for what is queued: an empty ring's
                # recv_held(0) goes through a whole wait.
                while True:
                    msg = ch.recv_held(0)
                    if msg is None:
                        break
                    msg = self._hand_over(msg)
                    if msg is not None:
                        msgs.append(msg)
                    if len(msgs) >= 64 or not ch.wait_message(0):
                        break
        except _PeerDead:
            _exit_now(1)
        finally:
            reader.release()
        self._loop_reading = True
        try:
            for msg in msgs:
                self._dispatch(msg)
        finally:
            self._loop_reading = False
        if loop in self._async_ready:
            # On the loop's thread already: no callback, no wake-up.
            self._resolve_ready(loop)
        if self._cond_waiters:
            # As _wait: a thread that waits for the reader lock looks again.
            with self._cond:
                self._cond.notify_all()
        return True

    def _send_call(self, request, decoupled, waker):
        """Write a call's inputs and send its InferExec; returns the call
        (registered with waker), or the error response of inputs that did
        not fit."""
        call_id = next(self._call_ids)
        inputs = []
        room = [self._inline_room]
        try:
            for t in request._inputs:
                inputs.append(self._write_tensor(t, room))
        except _PoolExhausted as exc:
            self._free_owned([i[T_OFFSET] for i in inputs if i[T_SIZE] and i[T_LOC] == _ARENA1])
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
        call.waker = waker
        # The stub's own loop reads the answers itself, and wakes the
        # supervisor once for the calls it sent in one turn (BLSLoop).
        loop = waker[0] if waker is not None else None
        own_loop = type(loop) is BLSLoop
        with self._cond:
            self._calls[call_id] = call
            if waker is not None:
                self._async_open += 1
                if not self._pump_started and not own_loop:
                    self._pump_started = True
                    threading.Thread(target=self._pump, name="stubvisor-bls-pump", daemon=True).start()
        msg = [_K_INFER_EXEC, call_id, request._model_name, request._model_version, wire, decoupled]
        try:
            if own_loop:
                try:
                    self.ch.send(msg, False)
                except _PeerDead:
                    _exit_now(1)
                loop._wake_due = True
            else:
                self._send(msg)
        except BaseException:
            with self._cond:
                if self._calls.pop(call_id, None) is not None and waker is not None:
                    self._async_open -= 1
            raise
        return call

    def _drop_call(self, call_id):
        with self._cond:
            call = self._calls.pop(call_id, None)
        if call is not None:
            while call.queue:
                self._return_blocks(call.queue.popleft())

    def _return_blocks(self, wire):
        """Hand back, with the next Free, the arena 0 blocks of a BLS
        response nobody will read."""
        for t in wire[RS_OUTPUTS]:
            if t[T_LOC] == _ARENA0 and t[T_SIZE]:
                self._pending_free.append(t[T_OFFSET])

    def _bls_response(self, wire):
        """An InferenceResponse over a wire response whose outputs live in
        arena 0: zero-copy numpy views, handed back with Free once the
        model drops them (BYTES are copied out and handed back at once);
        small ones come in the message."""
        outputs = []
        pending = self._pending_free
        for t in wire[RS_OUTPUTS]:
            # Readers ignore trailing elements they do not know.
            name, dtype, shape, loc, off, size = (t[T_NAME], t[T_DATA_TYPE], t[T_SHAPE], t[T_LOC], t[T_OFFSET],
                                                  t[T_SIZE])
            if size == 0:
                array = np.empty(shape, dtype=object if dtype == pb._BYTES else pb._WIRE_DTYPE[dtype])
            elif loc == _INLINE:
                # A small output came in the message: a writable copy of
                # its bytes, nothing to hand back.
                if dtype == pb._BYTES:
                    array = pb.deserialize_bytes_tensor(t[T_DATA]).reshape(shape)
                else:
                    array = np.frombuffer(bytearray(t[T_DATA]), dtype=pb._WIRE_DTYPE[dtype]).reshape(shape)
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
        error = wire[RS_ERROR]
        response._error = pb.TritonError(error[E_MESSAGE], error[E_CODE]) if error else None
        response._params = wire[RS_PARAMETERS_JSON] if len(wire) > RS_PARAMETERS_JSON and wire[RS_PARAMETERS_JSON] else ""
        response._release = None
        return response


class _RingSelector(selectors.DefaultSelector):
    """The selector of BLSLoop: while async_exec calls are open and the
    loop has nothing ready, the loop's thread sleeps on the channel
    instead of its file descriptors (looking at those first), and reads
    the answers itself."""

    def __init__(self, host):
        super().__init__()
        self._host = host
        self.loop = None
        # A look at the descriptors without building select's list.
        epoll = getattr(self, "_selector", None) if isinstance(self, getattr(selectors, "EpollSelector", ())) else None
        self._peek = (lambda: epoll.poll(0, 1)) if epoll is not None else (lambda: super(_RingSelector, self).select(0))

    def select(self, timeout=None):
        host = self._host
        loop = self.loop
        if loop._wake_due:
            # The calls sent since the last turn: one wake-up for them all.
            loop._wake_due = False
            host.ch.wake_reader()
        if not host._async_open:
            return super().select(timeout)
        if timeout is not None and timeout <= 0:
            if host.ch.wait_message(0):
                host._loop_read(loop, 0)
            return super().select(0) if self._peek() else []
        # Announced before the look at the descriptors: a thread that
        # writes the loop's self-pipe after it then ends the sleep too.
        loop._ring_waiting = True
        try:
            if self._peek():
                return super().select(0)
            if host._loop_read(loop, timeout):
                return []
        finally:
            loop._ring_waiting = False
        # Another thread reads the channel: it wakes the loop through the
        # self-pipe, or stops reading within a slice.
        return super().select(_PUMP_SLICE if timeout is None or timeout > _PUMP_SLICE else timeout)


class BLSLoop(asyncio.SelectorEventLoop):
    """The stub's event loop (async execute, async_exec): its thread reads
    the answers of its async_exec calls itself (_RingSelector). A callback
    handed over from another thread (call_soon_threadsafe) wakes a loop
    asleep on the channel as well as one asleep on its descriptors."""

    def __init__(self, host):
        self._ring_waiting = False
        self._wake_due = False  # calls sent without waking the supervisor
        self._ring_host = host
        selector = _RingSelector(host)
        super().__init__(selector)
        selector.loop = self

    def _write_to_self(self):
        super()._write_to_self()
        if self._ring_waiting:
            self._ring_host.ch.wake_waiter()
