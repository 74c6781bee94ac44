"""The msgpack bytes of the stub's most frequent message, made by hand.

Nearly every ExecuteDone answers one request with a few small fixed-size
outputs that travel inline. Packing that message as nested lists costs
msgpack about 400 instructions an element (12k for add_sub's 28); most of
its bytes are the same from one request to the next. Here each output's
descriptor up to its bytes ([name, data_type, shape, LOC_INLINE, 0, size]
and the bin header) is encoded once per (name, data_type, shape) and
kept, and a message is the join of a few pieces.

The bytes are exactly what msgpack.Packer(use_bin_type=True) makes of the
same lists (test_fastwire checks it), so the Go codec reads them as any
other frame.
"""

import struct

from . import ipc

_FIXINT = [bytes((i,)) for i in range(128)]
_FIXARRAY = [bytes((0x90 | i,)) for i in range(16)]
_U16 = struct.Struct(">BH")
_U32 = struct.Struct(">BI")
_U64 = struct.Struct(">BQ")
_BYTES = 13  # backendapi.TypeBytes
_HEADS_MAX = 1024  # descriptor heads kept; a model with more shapes starts over


def uint(n):
    """A non-negative int in msgpack's shortest form."""
    if n < 128:
        return _FIXINT[n]
    if n < 0x100:
        return bytes((0xCC, n))
    if n < 0x10000:
        return _U16.pack(0xCD, n)
    if n < 0x100000000:
        return _U32.pack(0xCE, n)
    return _U64.pack(0xCF, n)


# msgpack's own Packer writes an int in its shortest form too, in C, for
# about half of uint()'s instructions (a Python call costs about 350). Its
# pack() of an int runs whole under the GIL (no Python code inside), so one
# Packer serves every thread. The stub's own codec (no msgpack) keeps uint.
pack_uint = ipc.msgpack.Packer(autoreset=True).pack if ipc.msgpack.__name__ == "msgpack" else uint


def array_header(n):
    if n < 16:
        return _FIXARRAY[n]
    if n < 0x10000:
        return _U16.pack(0xDC, n)
    return _U32.pack(0xDD, n)


def _str(s):
    b = s.encode("utf-8")
    n = len(b)
    if n < 32:
        return bytes((0xA0 | n,)) + b
    if n < 0x100:
        return bytes((0xD9, n)) + b
    if n < 0x10000:
        return _U16.pack(0xDA, n) + b
    return _U32.pack(0xDB, n) + b


def _bin_header(n):
    if n < 0x100:
        return bytes((0xC4, n))
    if n < 0x10000:
        return _U16.pack(0xC5, n)
    return _U32.pack(0xC6, n)


# (name, data_type, shape) -> inline_head's answer; the hot path looks
# here first and calls inline_head only when it misses. The size is not in
# the key: a fixed-size type and a shape give it.
heads = {}


def inline_head(name, dtype, shape, size):
    """The bytes of an inline output's descriptor up to its data, [name,
    dtype, shape, LOC_INLINE, 0, size, <bin header of size>], or b"" when
    such an output does not travel inline in the usual ExecuteDone
    (BYTES, no elements, no dimensions, more than INLINE_MAX bytes)."""
    key = (name, dtype, shape)
    head = heads.get(key)
    if head is None:
        if len(heads) >= _HEADS_MAX:
            heads.clear()
        if dtype == _BYTES or not size or not shape or size > ipc.INLINE_MAX:
            head = b""
        else:
            head = b"".join([b"\x97", _str(name), uint(dtype), array_header(len(shape))]
                            + [uint(d) for d in shape]
                            + [uint(ipc.LOC_INLINE), b"\x00", uint(size), _bin_header(size)])
        heads[key] = head
    return head


# The pieces around the outputs of [KIND_EXECUTE_DONE, batch_id, nil,
# [responses]], each response [handle, FLAG_FINAL, nil, [outputs], ""].
DONE_OPEN = bytes((0x94, ipc.KIND_EXECUTE_DONE))
_NIL = b"\xc0"
_FINAL_NIL = bytes((ipc.FLAG_FINAL, 0xC0))
_NIL_ARRAY = [_NIL + h for h in _FIXARRAY]
_FINAL_NIL_ARRAY = [_FINAL_NIL + h for h in _FIXARRAY]
NO_PARAMETERS = b"\xa0"
RESPONSE_OPEN = b"\x95"  # a response's array header; its handle, then final_nil_array
FINAL_NIL_ARRAY = _FINAL_NIL_ARRAY  # final_nil_array(n) for n < 16


def nil_array(n):
    """nil, then the header of an array of n elements."""
    return _NIL_ARRAY[n] if n < 16 else _NIL + array_header(n)


def final_nil_array(n):
    """FLAG_FINAL, nil (no error), then the header of an array of n
    outputs."""
    return _FINAL_NIL_ARRAY[n] if n < 16 else _FINAL_NIL + array_header(n)


def final_response_open(handle, n):
    """The start of a final response without error of n outputs; their
    descriptors and NO_PARAMETERS follow."""
    return b"\x95" + uint(handle) + (_FINAL_NIL_ARRAY[n] if n < 16 else _FINAL_NIL + array_header(n))
