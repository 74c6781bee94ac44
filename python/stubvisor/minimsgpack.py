"""A small pure-Python MessagePack encoder and decoder.

The stub speaks msgpack on its rings. Debian's python3-msgpack is the fast
path; this module stands in only when `import msgpack` fails, as in a
conda-pack EXECUTION_ENV_PATH built for Triton (numpy, no msgpack). It
covers the types the wire uses: nil, bool, int (to 64 bits), float, str,
bin, array and map. It offers the two entry points the stub uses, with
msgpack's signatures: Packer(use_bin_type=True, autoreset=True).pack(obj)
and unpackb(data, raw=False, strict_map_key=False).
"""

import struct

__all__ = ["Packer", "packb", "unpackb", "ExtraData", "FormatError"]


class FormatError(ValueError):
    """The data is not MessagePack this module reads."""


class ExtraData(ValueError):
    """unpackb found bytes after the first object."""


_B = struct.Struct(">B")
_H = struct.Struct(">H")
_I = struct.Struct(">I")
_Q = struct.Struct(">Q")
_b = struct.Struct(">b")
_h = struct.Struct(">h")
_i = struct.Struct(">i")
_q = struct.Struct(">q")
_f = struct.Struct(">f")
_d = struct.Struct(">d")


def _pack_len(out, n, fix_base, fix_max, m8, m16, m32):
    if n <= fix_max:
        out.append(fix_base | n)
    elif m8 is not None and n <= 0xFF:
        out.append(m8)
        out.append(n)
    elif n <= 0xFFFF:
        out.append(m16)
        out += _H.pack(n)
    elif n <= 0xFFFFFFFF:
        out.append(m32)
        out += _I.pack(n)
    else:
        raise ValueError("object too large for MessagePack: %d" % n)


# (bound, marker, layout) of the int formats past the fixints, smallest
# first: unsigned for positive values, signed for negative ones.
_UINTS = ((0xFF, 0xCC, _B), (0xFFFF, 0xCD, _H), (0xFFFFFFFF, 0xCE, _I), (0xFFFFFFFFFFFFFFFF, 0xCF, _Q))
_INTS = ((-0x80, 0xD0, _b), (-0x8000, 0xD1, _h), (-0x80000000, 0xD2, _i), (-0x8000000000000000, 0xD3, _q))


def _pack_int(out, v):
    if 0 <= v <= 0x7F:
        out.append(v)
        return
    if -32 <= v < 0:
        out.append(v & 0xFF)
        return
    for bound, marker, layout in _UINTS if v > 0 else _INTS:
        if (v <= bound) if v > 0 else (v >= bound):
            out.append(marker)
            out += layout.pack(v)
            return
    raise OverflowError("Integer value out of range")


def _pack(out, obj, depth):
    if depth > 512:
        raise ValueError("recursion limit exceeded")
    if obj is None:
        out.append(0xC0)
    elif obj is True:
        out.append(0xC3)
    elif obj is False:
        out.append(0xC2)
    elif isinstance(obj, int):
        _pack_int(out, int(obj))
    elif isinstance(obj, float):
        out.append(0xCB)
        out += _d.pack(obj)
    elif isinstance(obj, str):
        b = obj.encode("utf-8")
        _pack_len(out, len(b), 0xA0, 31, 0xD9, 0xDA, 0xDB)
        out += b
    elif isinstance(obj, (bytes, bytearray, memoryview)):
        b = memoryview(obj).cast("B") if isinstance(obj, memoryview) else obj
        _pack_len(out, len(b), 0x00, -1, 0xC4, 0xC5, 0xC6)
        out += b
    elif isinstance(obj, (list, tuple)):
        _pack_len(out, len(obj), 0x90, 15, None, 0xDC, 0xDD)
        for v in obj:
            _pack(out, v, depth + 1)
    elif isinstance(obj, dict):
        _pack_len(out, len(obj), 0x80, 15, None, 0xDE, 0xDF)
        for k, v in obj.items():
            _pack(out, k, depth + 1)
            _pack(out, v, depth + 1)
    else:
        raise TypeError("can not serialize %r object" % type(obj).__name__)


def packb(obj, use_bin_type=True):
    """Return obj encoded as MessagePack bytes (bytes as bin, str as str)."""
    if not use_bin_type:
        raise ValueError("only use_bin_type=True is supported")
    out = bytearray()
    _pack(out, obj, 0)
    return bytes(out)


class Packer:
    """msgpack.Packer's pack() for the stub's use (use_bin_type=True,
    autoreset=True: every pack() returns one object's bytes)."""

    def __init__(self, use_bin_type=True, autoreset=True):
        if not use_bin_type or not autoreset:
            raise ValueError("only use_bin_type=True, autoreset=True are supported")

    def pack(self, obj):
        return packb(obj)


class _Reader:
    __slots__ = ("buf", "pos", "strict_map_key")

    def __init__(self, buf, strict_map_key):
        self.buf = buf
        self.pos = 0
        self.strict_map_key = strict_map_key

    def take(self, n):
        p = self.pos
        if p + n > len(self.buf):
            raise ValueError("Unpack failed: incomplete input")
        self.pos = p + n
        return self.buf[p:p + n]

    def unpack(self, st):
        return st.unpack(self.take(st.size))[0]

    def obj(self, depth):
        if depth > 512:
            raise ValueError("recursion limit exceeded")
        c = self.take(1)[0]
        if c <= 0x7F:
            return c
        if c >= 0xE0:
            return c - 0x100
        if 0x80 <= c <= 0x8F:
            return self.map(c & 0x0F, depth)
        if 0x90 <= c <= 0x9F:
            return [self.obj(depth + 1) for _ in range(c & 0x0F)]
        if 0xA0 <= c <= 0xBF:
            return self.str(c & 0x1F)
        if c == 0xC0:
            return None
        if c == 0xC2:
            return False
        if c == 0xC3:
            return True
        if c in (0xC4, 0xC5, 0xC6):
            n = self.unpack((_B, _H, _I)[c - 0xC4])
            return bytes(self.take(n))
        if c == 0xCA:
            return self.unpack(_f)
        if c == 0xCB:
            return self.unpack(_d)
        if 0xCC <= c <= 0xCF:
            return self.unpack((_B, _H, _I, _Q)[c - 0xCC])
        if 0xD0 <= c <= 0xD3:
            return self.unpack((_b, _h, _i, _q)[c - 0xD0])
        if c in (0xD9, 0xDA, 0xDB):
            return self.str(self.unpack((_B, _H, _I)[c - 0xD9]))
        if c in (0xDC, 0xDD):
            n = self.unpack((_H, _I)[c - 0xDC])
            return [self.obj(depth + 1) for _ in range(n)]
        if c in (0xDE, 0xDF):
            return self.map(self.unpack((_H, _I)[c - 0xDE]), depth)
        raise FormatError("unsupported MessagePack type 0x%02x" % c)

    def str(self, n):
        return bytes(self.take(n)).decode("utf-8")

    def map(self, n, depth):
        out = {}
        for _ in range(n):
            k = self.obj(depth + 1)
            if self.strict_map_key and type(k) not in (str, bytes):
                raise ValueError("%s is not allowed for map key when strict_map_key=True" % type(k).__name__)
            out[k] = self.obj(depth + 1)
        return out


def unpackb(data, raw=False, strict_map_key=False):
    """Decode one MessagePack object from data (bytes-like); strings come
    back as str (raw=False), bin as bytes, arrays as lists."""
    if raw:
        raise ValueError("only raw=False is supported")
    r = _Reader(memoryview(data).cast("B") if isinstance(data, memoryview) else memoryview(data), strict_map_key)
    obj = r.obj(0)
    if r.pos != len(r.buf):
        raise ExtraData("unpack(b) received extra data.")
    return obj
