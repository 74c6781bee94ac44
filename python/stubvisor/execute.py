"""Execute, the hot path: an Execute message becomes pb_utils requests,
the model runs, and what it returns (or leaves to a response sender) is
collected. The Python side of supervisor/stubproc/exchange.go."""

import asyncio
import functools
import weakref

import numpy as np

import triton_python_backend_utils as pb

from .common import (
    _FORKED,
    _ARENA1,
    _BYTES,
    _CLIENT,
    _CUDA,
    _FINAL,
    _FrameTooLarge,
    _INLINE,
    _INLINE_MAX,
    _INTERNAL,
    _K_EXECUTE_DONE,
    _K_RESPONSE,
    _clip,
    _PeerDead,
    _exit_now,
    _over_memory,
)
from .fields import (
    EXECUTE_REQUESTS,
    M_ID,
    O_NAME,
    O_OFFSET,
    O_REGION_ID,
    O_SIZE,
    RS_OUTPUTS,
    R_OUTPUT_TARGETS,
    R_TRACE_CONTEXT,
    T_LOC,
    T_OFFSET,
    T_SIZE,
)
from .fastwire import DONE_OPEN as _DONE_OPEN
from .fastwire import FINAL_NIL_ARRAY as _FINAL_NIL_ARRAY
from .fastwire import NO_PARAMETERS as _NO_PARAMETERS
from .fastwire import RESPONSE_OPEN as _RESPONSE_OPEN
from .fastwire import final_nil_array as _final_nil_array
from .fastwire import heads as _heads
from .fastwire import inline_head as _inline_head
from .fastwire import nil_array as _nil_array
from .fastwire import pack_uint as _uint
from .loader import StubError, describe
from .native import FAST as _FAST

_fast_requests = _FAST.requests if _FAST is not None else None
_fast_done = _FAST.usual_done if _FAST is not None else None

_RESCHEDULE = pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
_RELEASE_ALL = pb.TRITONSERVER_REQUEST_RELEASE_ALL
_Response = pb.InferenceResponse
_DEFAULT_TRACE = pb._DEFAULT_TRACE
_DEFAULT_MEMORY = pb._DEFAULT_PREFERRED_MEMORY
_new_tensor = pb._new_tensor
_Tensor = pb.Tensor
_new_request = pb._new_request
_Request = pb.InferenceRequest


class ExecuteMixin:
    """The part of Host that runs execute."""

    def _on_execute(self, msg):
        batch_id = msg[M_ID]
        # The compiled fast path builds the usual requests; None leaves
        # the message to the Python code, which handles every case.
        requests = None if _fast_requests is None else _fast_requests(
            msg[EXECUTE_REQUESTS], self, self.model_name, self.model_version)
        if requests is None:
            requests, on_device = self._requests(msg)
        else:
            on_device = None
        try:
            if on_device:
                self._inputs_to_host(on_device)
            # An attribute read, not getattr(): a builtin call costs more
            # than the (zero-cost) try.
            try:
                execute = self.model.execute
            except AttributeError:
                if self.model is None:
                    raise StubError("Python model '" + self.instance + "' is not initialized.") from None
                raise StubError("Python model " + self.model_file + " does not implement `execute` method.") from None
            returned = execute(requests)
            # iscoroutine costs an ABC check; the usual list is not one.
            if type(returned) is not list and asyncio.iscoroutine(returned):
                if self.decoupled:
                    future = asyncio.run_coroutine_threadsafe(returned, self._async_loop())
                    future.add_done_callback(functools.partial(self._background_done, requests))
                    returned = None
                else:
                    returned = asyncio.run_coroutine_threadsafe(returned, self._async_loop()).result()
            frame = None
            if type(returned) is list:
                if _fast_done is not None and not self.decoupled and not self._shm_targets:
                    frame = _fast_done(batch_id, requests, returned, self._inline_room)
                if frame is None:
                    frame = self._usual_done(batch_id, requests, returned)
            if frame is None:
                responses = self._collect(requests, returned)
        except Exception as exc:
            self._fail_batch(batch_id, requests, exc)
            return
        if frame is not None:
            # _send_frame inline.
            if _FORKED:
                self._check_owner("Talking to the server")
            try:
                self.ch.send_frame(frame)
            except _PeerDead:
                _exit_now(1)
            except _FrameTooLarge as exc:
                self._fail_batch(batch_id, requests, exc)
                return
            if self._cancelled:
                for req in requests:
                    self._cancelled.discard(req._handle)
            if self._pending_free:
                self._flush_frees()
            return
        out = []
        if responses:
            wire = self._wire_response
            room = [self._inline_room]
            try:
                for req, resp in responses:
                    out.append(wire(req, resp, _FINAL, room, True))
            except Exception as exc:
                self._free_owned([t[T_OFFSET] for r in out for t in r[RS_OUTPUTS] if t[T_SIZE] and t[T_LOC] == _ARENA1])
                self._fail_batch(batch_id, requests, exc)
                return
        msg = [_K_EXECUTE_DONE, batch_id, None, out]
        # One pass for the rare cases: rescheduled requests and response
        # senders the model holds.
        for r in requests:
            if r._send_state is not None or r._release_flags == _RESCHEDULE:
                again = [r._handle for r in requests if r._release_flags == _RESCHEDULE]
                pending = None if self.decoupled else self._left_to_sender(requests)
                if pending:
                    msg += [again, pending]
                elif again:
                    msg.append(again)
                break
        try:
            self._send(msg)
        except _FrameTooLarge as exc:
            # The answer is larger than a frame (a very large batch on a
            # small ring): the batch fails rather than never answering.
            self._free_owned([t[T_OFFSET] for r in out for t in r[RS_OUTPUTS] if t[T_SIZE] and t[T_LOC] == _ARENA1])
            self._fail_batch(batch_id, requests, exc)
            return
        if self._cancelled and not self.decoupled:
            for req in requests:
                self._cancelled.discard(req._handle)
        if self._pending_free:
            self._flush_frees()

    def _requests(self, msg):
        """The pb_utils requests of an Execute, and the inputs of theirs
        that live in CUDA memory (None when none do)."""
        requests = []
        on_device = None
        for w in msg[EXECUTE_REQUESTS]:
            # Tensors and the request are filled here slot by slot (what
            # pb._tensor and pb._fill_request do, without their calls),
            # from the wire's arrays unpacked at once in the order of
            # fields.REQUEST_FIELDS and TENSOR_FIELDS (test_fields checks
            # it): this runs for every request and every input.
            trace = _DEFAULT_TRACE
            if len(w) == 8:  # no output targets, no trace context
                handle, request_id, correlation_id, flags, wire_inputs, requested, params, timeout = w
            else:
                handle, request_id, correlation_id, flags, wire_inputs, requested, params, timeout = w[:8]
                if len(w) > R_OUTPUT_TARGETS:
                    if w[R_OUTPUT_TARGETS]:
                        self._shm_targets[handle] = {o[O_NAME]: (o[O_REGION_ID], o[O_OFFSET], o[O_SIZE])
                                                     for o in w[R_OUTPUT_TARGETS]}
                    if len(w) > R_TRACE_CONTEXT and w[R_TRACE_CONTEXT]:
                        trace = pb.InferenceTrace(w[R_TRACE_CONTEXT])
            inputs = []
            cuda = False
            for t in wire_inputs:
                # Six elements (an arena input), or seven: the region id
                # of a client or CUDA tensor, the bytes of an inline one.
                if len(t) != 7:
                    t = t[:7] if len(t) > 7 else t + [None]
                x = _new_tensor(_Tensor)
                x._name, x._dtype, x._shape, loc, offset, size, extra = t
                x._np = None
                if loc == _INLINE:
                    # The bytes came in the message: the src holds them
                    # where an arena input's holds its offset, and their
                    # length is its size (as_numpy reads them unchecked).
                    x._src = (loc, extra, len(extra))
                elif loc < _CLIENT:
                    x._src = (loc, offset, size)
                else:
                    cuda = cuda or loc == _CUDA
                    x._src = (loc, (extra, offset), size)
                inputs.append(x)
            if cuda:
                on_device = (on_device or []) + [x for x in inputs if not x.is_cpu()]
            r = _new_request(_Request)
            r._handle = handle
            r._id = request_id
            r._correlation_id = correlation_id
            r._flags = flags
            r._inputs = inputs
            r._requested = requested
            r._params = params
            r._timeout = timeout
            r._model_name = self.model_name
            r._model_version = self.model_version
            r._preferred_memory = _DEFAULT_MEMORY
            r._trace = trace
            r._sender = None
            r._send_state = None
            r._release_flags = _RELEASE_ALL
            r._rt = self
            r._final = False
            requests.append(r)
        return requests, on_device

    def _usual_done(self, batch_id, requests, returned):
        """The ExecuteDone frame of the usual batch, encoded by fastwire:
        execute returned one InferenceResponse per request, without error
        or parameters, for requests that hold no response sender and are
        not rescheduled, and every requested output is a small fixed-size
        array that travels inline (none goes to a client's region). None
        for anything else, which the general path (_collect,
        _wire_response) handles with its checks and texts."""
        if len(returned) != len(requests) or self.decoupled or self._shm_targets:
            return None
        heads = _heads
        uint = _uint
        # The pieces of fastwire's messages laid out here rather than
        # through its functions: a Python call costs about 350
        # instructions, and this runs for every batch.
        frame = [_DONE_OPEN, uint(batch_id), _nil_array(len(requests))]
        for req, resp in zip(requests, returned):
            if (type(resp) is not _Response or resp._error is not None or resp._params
                    or req._send_state is not None or req._release_flags != _RELEASE_ALL):
                return None
            req._final = True  # (the general path sets it too, if this one gives up)
            outputs = resp._outputs
            if req._requested:
                outputs = self._requested_outputs(req, outputs)
            n = len(outputs)
            frame += (_RESPONSE_OPEN, uint(req._handle), _FINAL_NIL_ARRAY[n] if n < 16 else _final_nil_array(n))
            for t in outputs:
                array = t._np
                if array is None:
                    return None
                # b"" (falsy) for an output that does not travel inline.
                head = heads.get((t._name, t._dtype, array.shape))
                if not head:
                    if head is not None:
                        return None
                    head = _inline_head(t._name, t._dtype, array.shape, array.nbytes)
                    if not head:
                        return None
                frame += (head, array.tobytes())
            frame.append(_NO_PARAMETERS)
        # Every inline output is at most INLINE_MAX bytes and takes two
        # pieces of the frame: only a batch with many can pass the inline
        # room (a quarter of a frame), and only then are they added up.
        if len(frame) * (_INLINE_MAX // 2) > self._inline_room and self._inline_bytes(requests, returned) > self._inline_room:
            return None
        return b"".join(frame)

    @staticmethod
    def _requested_outputs(req, outputs):
        requested = req._requested
        return [t for t in outputs if t._name in requested]

    def _inline_bytes(self, requests, returned):
        """The bytes of the outputs _usual_done put in its frame."""
        n = 0
        for req, resp in zip(requests, returned):
            outputs = self._requested_outputs(req, resp._outputs) if req._requested else resp._outputs
            for t in outputs:
                n += t._np.nbytes
        return n

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
        _over_memory(exc)
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
