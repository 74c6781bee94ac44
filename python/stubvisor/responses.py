"""Responses and memory: how the stub writes outputs (into arena 1, inline
in the message, or into a client's region), answers through a response
sender, and hands blocks back. The Python side of supervisor/stubproc/response.go."""

from .common import (
    _ARENA0,
    _ARENA1,
    _BYTES,
    _CLIENT,
    _FINAL,
    _INLINE,
    _INLINE_MAX,
    _INTERNAL,
    _K_FREE,
    _K_RESPONSE,
    _NONE,
    _PoolExhausted,
)
from .fields import (
    T_LOC,
    T_OFFSET,
    T_SIZE,
)


class ResponsesMixin:
    """The part of Host that builds and sends responses."""

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

    def _write_tensor(self, tensor, room, inputs=None):
        """Copy a tensor into arena 1, or into the message when it is
        small and the message has room (room[0]: the inline bytes it may
        still carry), and return its wire descriptor. With inputs (the
        request's, for its final response from execute), an output that is
        one of their arrays as it came is described in place, without a
        copy."""
        array = tensor._np
        if array is not None and tensor._dtype != _BYTES:
            # A shape goes out as the tuple numpy has (msgpack packs it as
            # an array).
            size = array.nbytes
            if size <= _INLINE_MAX and array.ndim:
                if not size:
                    return [tensor._name, tensor._dtype, array.shape, _NONE, 0, 0]
                if size <= room[0]:
                    # The common small output: its bytes travel in the message.
                    room[0] -= size
                    return [tensor._name, tensor._dtype, array.shape, _INLINE, 0, size, array.tobytes()]
            if inputs is not None:
                off = self._input_offset(inputs, array)
                if off is not None:
                    return [tensor._name, tensor._dtype, array.shape, _ARENA0, off, size]
        data, size, shape = tensor._payload()
        if size == 0:
            return [tensor._name, tensor._dtype, shape, _NONE, 0, 0]
        if size <= _INLINE_MAX and size <= room[0]:
            room[0] -= size
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

    def _wire_response(self, request, response, flags, room, in_place=False):
        """The wire form of one response, outputs pruned to the requested
        ones and written to the pool (small ones inline while room lasts,
        see _write_tensor). A pool that cannot hold them turns the response
        into an error."""
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
                        self._free_owned([o[T_OFFSET] for o in outputs if o[T_SIZE] and o[T_LOC] == _ARENA1])
                        return [request._handle, flags, error, [], ""]
                    outputs.append(out)
                    continue
                outputs.append(self._write_tensor(t, room, inputs))
        except _PoolExhausted as exc:
            self._free_owned([o[T_OFFSET] for o in outputs if o[T_SIZE] and o[T_LOC] == _ARENA1])
            return [request._handle, flags, [_INTERNAL, "Failed to allocate the response outputs in the shared "
                                             "memory pool: %s" % (exc,)], [], ""]
        except BaseException:
            self._free_owned([o[T_OFFSET] for o in outputs if o[T_SIZE] and o[T_LOC] == _ARENA1])
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

    def send_response(self, request, response, flags):
        self._check_owner("Sending a response")
        if response is None:
            wire = [request._handle, flags, None, [], ""]
        else:
            wire = self._wire_response(request, response, flags, [self._inline_room])
        self._send([_K_RESPONSE, 0, wire])
        if self._open_senders:
            self._open_senders.discard(request._handle)
        if flags & _FINAL:
            self._cancelled.discard(request._handle)
