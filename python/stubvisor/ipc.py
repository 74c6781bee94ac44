"""The stub side of stubvisor's shared-memory wire (see ipc/doc.go).

One region per stub: a memfd the supervisor created and this process
inherited as fd 3. It holds a header, a control block, two single-producer
single-consumer rings of msgpack frames (ring 0 supervisor -> stub, ring 1
stub -> supervisor) and two arenas for tensor bytes (arena 0 owned by the
supervisor, arena 1 by this stub). This module is the Python twin of the Go
package ipc; TestConstantsMatchPython in ipc/ fails when the two drift.

Why ctypes rather than the mmap module: the region is mapped once at its
full reserved size while the file behind it grows, and mmap.mmap refuses a
length past the end of the file. Why libatomic: the wake-up handshake needs
full-fence stores, which pure Python cannot issue on shared memory (on
x86-64 the ring indices use a plain store and a lock instead, which is
cheaper: see _publisher64; the sleep flags and other machines keep
libatomic).

Threads: send() may be called from any thread (a lock serialises it);
recv() admits one thread at a time. Views returned by view() alias the
mapping and must not be used after close().
"""

import bisect
import ctypes
import fcntl
import os
import platform
import struct
import sys
import threading
import time

try:
    import msgpack
except ImportError:
    # A Python environment built for Triton (conda-pack) has numpy but
    # not msgpack; the stub then speaks through its own small codec.
    from . import minimsgpack as msgpack

PROTOCOL_VERSION = 1
MAGIC = 0x0052535642555453  # b"STUBVSR\0" little-endian

# The process protocol (ipc/process.go): where the stub finds its region
# and lifeline, the environment that names it, and its heartbeat period.
REGION_FD = 3
LIFELINE_FD = 4
HEARTBEAT_PERIOD_MS = 100  # the default period, and the heartbeat thread's period while busy
HEARTBEAT_ENV = "STUBVISOR_HEARTBEAT_MS"  # the period the supervisor chose, in ms
INSTANCE_ENV = "STUBVISOR_INSTANCE"
MODEL_ENV = "STUBVISOR_MODEL"

# Header field offsets.
HDR_MAGIC = 0
HDR_VERSION = 8
HDR_FLAGS = 12
HDR_REGION_SIZE = 16
HDR_RING0_OFF = 24
HDR_RING1_OFF = 32
HDR_RING_BYTES = 40
HDR_SPIN_NS = 44
HDR_ARENA0_OFF = 48
HDR_ARENA1_OFF = 56
HDR_ARENA_MAX = 64
HDR_ARENA_DEFAULT = 72
HDR_ARENA_GROWTH = 80
HEADER_SIZE = 0x100

# Control block words, each on its own cache line.
CTL_DEAD = 0x100
CTL_STUB_PID = 0x140
CTL_SUP_HEARTBEAT = 0x180
CTL_STUB_HEARTBEAT = 0x1C0
CTL_ARENA0_USAGE = 0x200
CTL_ARENA1_USAGE = 0x240
CTL_MSG_POLL = 0x280

# Rings.
RING0_OFF = 0x1000
RING_INDEX_BYTES = 0x100
RING_TAIL = 0
RING_HEAD = 64
RING_READER_SLEEPING = 128
RING_WRITER_SLEEPING = 192
WRAP_MARKER = 0xFFFFFFFF
FRAME_ALIGN = 8
FRAME_HEADER_BYTES = 4
MIN_RING_BYTES = 4096
MAX_RING_BYTES = 1 << 30
MAX_SPIN_NS = 10_000_000

# Arenas.
PAGE_SIZE = 4096
BLOCK_ALIGN = 64
MAX_SETTING_FLAG = "--shm-max-byte-size"

# Message kinds (ipc/messages.go has the array shapes).
KIND_INITIALIZE = 1
KIND_EXECUTE = 2
KIND_FINALIZE = 3
KIND_RELEASE = 4
KIND_CANCEL = 5
KIND_IS_READY = 6
KIND_AUTO_COMPLETE = 7
KIND_INFER_RESULT = 8
KIND_MAP_REGION = 9
KIND_UNMAP_REGION = 10
KIND_COLLECT_METRICS = 11
KIND_CONTROL_RESULT = 12
KIND_HELLO = 64
KIND_RESULT = 65
KIND_RESPONSE = 66
KIND_EXECUTE_DONE = 67
KIND_LOG = 68
KIND_INFER_EXEC = 69
KIND_FREE = 70
KIND_INFER_CANCEL = 71
KIND_MODEL_CONTROL = 72

LOC_ARENA0 = 0
LOC_ARENA1 = 1
LOC_NONE = 2
LOC_CLIENT = 3  # a client's shared-memory region; the tensor's 7th element is its region id
LOC_CUDA = 4  # a client's CUDA region (inputs); the tensor's 7th element is its region id
LOC_INLINE = 5  # the bytes travel in the message as the tensor's 7th element
INLINE_MAX = 1024  # the largest tensor sent inline

FLAG_FINAL = 1

WAIT_SLICE = 0.020  # seconds; a wait with a deadline re-checks death this often
IDLE_SLICE = 0.25  # seconds; a wait without one (death and close also wake it)
_PREEMPT_GAP_NS = 50_000  # a clock jump this large while polling: the thread was descheduled
_MIN_BUDGET_NS = 1000  # the shortest poll worth starting


class PeerDead(Exception):
    """The supervisor is gone (dead word set, or this process was reparented)."""


class PoolExhausted(Exception):
    """An allocation does not fit under the arena's maximum size."""


class ProtocolError(Exception):
    """The region or a frame breaks the protocol."""


class FrameTooLarge(ValueError):
    """A message larger than a frame (half a ring): bulk data belongs in an
    arena (Go: ipc.ErrFrameTooLarge)."""


def constants():
    """Every wire constant by name, for the Go drift test."""
    return {k: v for k, v in globals().items()
            if k.isupper() and isinstance(v, int) and not k.startswith("_")}


def names():
    """The environment variables the process protocol names, for the Go
    drift test."""
    return {k: v for k, v in globals().items() if k.endswith("_ENV") and isinstance(v, str)}


# --- native helpers ---------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.syscall.restype = ctypes.c_long
_libc.syscall.argtypes = [ctypes.c_long, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32,
                          ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint32]

_MACHINE = platform.machine()
_SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}.get(_MACHINE)
if _SYS_FUTEX is None:
    raise ImportError("stubvisor.ipc: no futex syscall number for " + _MACHINE)
_FUTEX_WAIT = 0  # shared (not private): the words live in a shared mapping
_FUTEX_WAKE = 1

_PROT_READ_WRITE = 0x1 | 0x2
_MAP_SHARED = 0x01
_MAP_NORESERVE = 0x4000
_MAP_FAILED = ctypes.c_void_p(-1).value

_atomic = ctypes.CDLL("libatomic.so.1")
_SEQ_CST = 5
_atomic.__atomic_exchange_4.restype = ctypes.c_uint32
_atomic.__atomic_exchange_4.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int]
_atomic.__atomic_exchange_8.restype = ctypes.c_uint64
_atomic.__atomic_exchange_8.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int]
_atomic.__atomic_load_8.restype = ctypes.c_uint64
_atomic.__atomic_load_8.argtypes = [ctypes.c_void_p, ctypes.c_int]
_atomic.__atomic_load_4.restype = ctypes.c_uint32
_atomic.__atomic_load_4.argtypes = [ctypes.c_void_p, ctypes.c_int]
_atomic.__atomic_fetch_add_8.restype = ctypes.c_uint64
_atomic.__atomic_fetch_add_8.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int]
_xchg4 = _atomic.__atomic_exchange_4
_xchg8 = _atomic.__atomic_exchange_8
# Bound here: inside a class body the name would be mangled (_Channel__atomic...).
_fetch_add8 = _atomic.__atomic_fetch_add_8

_memory_view = ctypes.pythonapi.PyMemoryView_FromMemory
_memory_view.restype = ctypes.py_object
_memory_view.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int]
_PYBUF_WRITE = 0x200


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _futex_wait(addr, val, seconds):
    ts = _Timespec(int(seconds), int((seconds % 1) * 1e9))
    _libc.syscall(_SYS_FUTEX, addr, _FUTEX_WAIT, val & 0xFFFFFFFF, ctypes.addressof(ts), None, 0)


def _futex_wake(addr):
    _libc.syscall(_SYS_FUTEX, addr, _FUTEX_WAKE, 0x7FFFFFFF, None, None, 0)


class _AcquireWord:
    """A shared word read with libatomic (sequentially consistent), for
    machines whose plain loads may be reordered (not x86-64)."""

    __slots__ = ("_addr", "_load")

    def __init__(self, addr, load):
        self._addr = addr
        self._load = load

    @property
    def value(self):
        return self._load(self._addr, _SEQ_CST)


_PLAIN_LOADS = _MACHINE in ("x86_64", "amd64")


def _word64(addr):
    """An object whose .value loads the u64 at addr with acquire order.
    x86-64 orders plain loads (TSO), so a ctypes read suffices there."""
    if _PLAIN_LOADS:
        return ctypes.c_uint64.from_address(addr)
    return _AcquireWord(addr, _atomic.__atomic_load_8)


def _word32(addr):
    if _PLAIN_LOADS:
        return ctypes.c_uint32.from_address(addr)
    return _AcquireWord(addr, _atomic.__atomic_load_4)


def _publisher64(addr):
    """(publish, word, fence): publish(value) stores a u64 at addr as a
    full fence: every later load of this thread is ordered after the store
    (the Dekker handshake of the wake-up flags needs it). On x86-64 a plain
    store to word followed by acquiring and releasing the lock fence,
    which nobody else takes: the acquire is a locked read-modify-write
    (mutual exclusion needs one), which x86 orders as a full fence, and
    costs a fifth of a call into libatomic through ctypes (about 1k
    instructions against 4.6k); the hot paths inline these three steps
    (word and fence are None elsewhere). Elsewhere the sequentially
    consistent exchange of libatomic."""
    if not _PLAIN_LOADS:
        return (lambda value: _xchg8(addr, value, _SEQ_CST)), None, None
    word = ctypes.c_uint64.from_address(addr)
    fence = threading.Lock()
    acquire, release = fence.acquire, fence.release

    def publish(value):
        word.value = value
        acquire()
        release()

    return publish, word, fence


def _loader64(addr):
    w = _word64(addr)
    return lambda: w.value


def _loader32(addr):
    w = _word32(addr)
    return lambda: w.value


_U32 = struct.Struct("<I")


class _SwappedWords:
    """_words32 where the native byte order is not the wire's."""

    __slots__ = ("_mv",)

    def __init__(self, mv):
        self._mv = mv

    def __getitem__(self, i):
        return _U32.unpack_from(self._mv, 4 * i)[0]

    def __setitem__(self, i, value):
        _U32.pack_into(self._mv, 4 * i, value)

    def release(self):
        pass


def _words32(mv):
    """The region as little-endian u32 words, for frame headers (4-byte
    aligned): a cast view where that is the native order, whose item costs
    less than a struct call."""
    return mv.cast("I") if sys.byteorder == "little" else _SwappedWords(mv)
_unpackb = msgpack.unpackb
if getattr(msgpack, "version", (1, 0)) >= (1, 0):
    # Keyword arguments cost about 1k instructions a call. msgpack 1.0's
    # defaults are raw=False and strict_map_key=True: recv decodes with
    # them first and again, allowing any key, when a map has keys other
    # than strings (none in the frequent messages).
    _unpack_strict = msgpack.unpackb
else:
    def _unpack_strict(data):
        return _unpackb(data, raw=False, strict_map_key=True)


# fastpath.Ring when the compiled fast path loaded (stubvisor/native.py);
# channels made before that (or without it) run the Python code alone.
FAST_RING = None


def _page_up(n):
    return (n + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1)


def _round_up(n, to):
    return (n + to - 1) // to * to


def format_bytes(n):
    """Render a byte count as the Go side does (shmpool.FormatBytes)."""
    if n >= 1 << 30 and n % (1 << 30) == 0:
        return "%d GiB" % (n >> 30)
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return "%d MiB" % (n >> 20)
    if n >= 1 << 20:
        return "%.1f MiB" % (n / (1 << 20))
    if n >= 1 << 10 and n % (1 << 10) == 0:
        return "%d KiB" % (n >> 10)
    return "%d bytes" % n


def layout(ring_bytes, spin_ns, arena_max, arena_default, arena_growth):
    """The header fields the Go side lays out for these settings (already
    page-rounded sizes), as a dict keyed like the HDR_ names."""
    ring0 = RING0_OFF
    ring1 = _page_up(ring0 + RING_INDEX_BYTES + ring_bytes)
    arena0 = _page_up(ring1 + RING_INDEX_BYTES + ring_bytes)
    arena1 = arena0 + arena_max
    return {
        "region_size": arena1 + arena_max, "ring0_off": ring0, "ring1_off": ring1,
        "ring_bytes": ring_bytes, "spin_ns": spin_ns, "arena0_off": arena0,
        "arena1_off": arena1, "arena_max": arena_max, "arena_default": arena_default,
        "arena_growth": arena_growth,
    }


_HDR = struct.Struct("<QIIQQQIIQQQQQ")  # magic .. arena_growth, offsets 0..88
_HDR_FIELDS = ("magic", "version", "flags", "region_size", "ring0_off", "ring1_off",
               "ring_bytes", "spin_ns", "arena0_off", "arena1_off", "arena_max",
               "arena_default", "arena_growth")


def _check_header(raw):
    if len(raw) < HEADER_SIZE:
        raise ProtocolError("stubvisor.ipc: header of %d bytes: not a stubvisor region" % len(raw))
    h = dict(zip(_HDR_FIELDS, _HDR.unpack_from(raw, 0)))
    if h["magic"] != MAGIC:
        raise ProtocolError("stubvisor.ipc: magic %#x: not a stubvisor region" % h["magic"])
    if h["version"] != PROTOCOL_VERSION:
        raise ProtocolError("stubvisor.ipc: protocol version %d, this side speaks %d"
                            % (h["version"], PROTOCOL_VERSION))
    rb = h["ring_bytes"]
    if rb < MIN_RING_BYTES or rb > MAX_RING_BYTES or rb & (rb - 1):
        raise ProtocolError("stubvisor.ipc: ring size %d is not a power of two in range" % rb)
    if h["spin_ns"] > MAX_SPIN_NS:
        raise ProtocolError("stubvisor.ipc: spin of %d ns out of range" % h["spin_ns"])
    amax, adef, agrow = h["arena_max"], h["arena_default"], h["arena_growth"]
    if (amax == 0 or amax % PAGE_SIZE or adef % PAGE_SIZE or adef > amax or agrow == 0
            or agrow % PAGE_SIZE or amax > 1 << 46 or agrow > 1 << 46):
        raise ProtocolError("stubvisor.ipc: arena sizes max=%d default=%d growth=%d out of range"
                            % (amax, adef, agrow))
    want = layout(rb, h["spin_ns"], amax, adef, agrow)
    for k, v in want.items():
        if h[k] != v:
            raise ProtocolError("stubvisor.ipc: header %s=%d, expected %d: not a layout this "
                                "version knows" % (k, h[k], v))
    return h


def _write_header(buf, lay):
    _HDR.pack_into(buf, 0, MAGIC, PROTOCOL_VERSION, 0, lay["region_size"], lay["ring0_off"],
                   lay["ring1_off"], lay["ring_bytes"], lay["spin_ns"], lay["arena0_off"],
                   lay["arena1_off"], lay["arena_max"], lay["arena_default"], lay["arena_growth"])


def _fallocate(fd, off, n):
    while True:
        try:
            os.posix_fallocate(fd, off, n)
            return
        except InterruptedError:
            continue


class _Ring:
    """One direction of the wire as seen from one side. cursor is this
    side's own index (tail when producing, head when consuming), kept
    locally because only this side writes it."""

    def __init__(self, base, mv, off, size, producer):
        idx = base + off
        self.tail_addr = idx + RING_TAIL
        self.head_addr = idx + RING_HEAD
        self.reader_sleeping_addr = idx + RING_READER_SLEEPING
        self.writer_sleeping_addr = idx + RING_WRITER_SLEEPING
        self.tail = _word64(self.tail_addr)
        self.head = _word64(self.head_addr)
        self.reader_sleeping = _word32(self.reader_sleeping_addr)
        self.writer_sleeping = _word32(self.writer_sleeping_addr)
        self.load_tail = _loader64(self.tail_addr)
        self.load_head = _loader64(self.head_addr)
        # Only the producer stores tail and only the consumer head.
        self.publish, self.own, fence = _publisher64(self.tail_addr if producer else self.head_addr)
        if fence is not None:
            self.fence_acquire, self.fence_release = fence.acquire, fence.release
        self.cursor = self.tail.value if producer else self.head.value
        self.data_off = off + RING_INDEX_BYTES
        self.size = size
        self.mask = size - 1
        self.max_frame = size // 2 - FRAME_HEADER_BYTES

    def depth(self):
        return self.tail.value - self.head.value


class _Arena:
    """The owner's allocator for one arena: address-ordered first fit with
    coalescing, 64-byte blocks, bookkeeping in this process only (the same
    policy as Go's shmpool.Arena). Growth is posix_fallocate on the region
    file, which never shrinks it."""

    def __init__(self, fd, base, arena_max, default, growth, usage_addr):
        self._fd = fd
        self.base = base
        self.max = arena_max
        self.growth = growth
        self._offs = [0]          # free extents, sorted by offset
        self._sizes = [arena_max]
        self._used = {}
        self.in_use = 0
        self.high_water = 0
        self.committed = 0
        self._words = [ctypes.c_uint64.from_address(usage_addr + 8 * i) for i in range(3)]
        self._lock = threading.Lock()
        if default:
            _fallocate(fd, base, default)
        self.committed = default
        self._publish()

    def _publish(self):
        self._words[0].value = self.committed
        self._words[1].value = self.in_use
        self._words[2].value = self.high_water

    def _exhausted(self, n):
        return PoolExhausted(
            "shmpool: allocate %s: pool maximum of %s reached, %s in use (raise %s): pool exhausted"
            % (format_bytes(n), format_bytes(self.max), format_bytes(self.in_use), MAX_SETTING_FLAG))

    def alloc(self, n):
        if n < 0:
            raise ValueError("stubvisor.ipc: alloc of %d bytes" % n)
        size = _round_up(max(n, 1), BLOCK_ALIGN)
        with self._lock:
            if size > self.max:
                raise self._exhausted(n)
            sizes = self._sizes
            for i in range(len(sizes)):
                if sizes[i] >= size:
                    break
            else:
                raise self._exhausted(n)
            off = self._offs[i]
            end = off + size
            if end > self.committed:
                grown = min(max(self.committed + self.growth, _page_up(end)), self.max)
                try:
                    _fallocate(self._fd, self.base + self.committed, grown - self.committed)
                except OSError as e:
                    raise PoolExhausted("shmpool: allocate %s: grow region to %s: %s"
                                        % (format_bytes(n), format_bytes(self.base + grown), e)) from e
                self.committed = grown
            if sizes[i] == size:
                del self._offs[i]
                del sizes[i]
            else:
                self._offs[i] += size
                sizes[i] -= size
            self._used[off] = size
            self.in_use += size
            if self.in_use > self.high_water:
                self.high_water = self.in_use
            self._publish()
            return off

    def free(self, off):
        with self._lock:
            size = self._used.pop(off, None)
            if size is None:
                raise ValueError("shmpool: free offset %d: no block allocated at this offset" % off)
            self.in_use -= size
            offs, sizes = self._offs, self._sizes
            i = bisect.bisect_right(offs, off)
            merge_prev = i > 0 and offs[i - 1] + sizes[i - 1] == off
            merge_next = i < len(offs) and off + size == offs[i]
            if merge_prev and merge_next:
                sizes[i - 1] += size + sizes[i]
                del offs[i]
                del sizes[i]
            elif merge_prev:
                sizes[i - 1] += size
            elif merge_next:
                offs[i] = off
                sizes[i] += size
            else:
                offs.insert(i, off)
                sizes.insert(i, size)
            self._publish()

    def usage(self):
        return {"committed": self.committed, "in_use": self.in_use,
                "high_water": self.high_water, "max": self.max}


class Channel:
    """One side of a region. Use Channel.attach(fd) in a stub."""

    def __init__(self, fd, side, header):
        # side 1 is the stub; side 0 (the supervisor) exists here only so
        # tests can drive a stub without Go.
        self._fd = fd
        self._side = side
        self._closed = False
        self.header = header
        self.region_size = header["region_size"]
        self.spin_ns = header["spin_ns"]
        # Poll budgets of the two kinds of wait (a message, room to send),
        # learnt as in the Go side's spinner (ipc/spin.go): see _wait_change.
        self._budget = [self.spin_ns, self.spin_ns]
        # The sleep slice of a wait without deadline: a stub's Host, whose
        # heartbeat checks the parent every beat, lengthens it.
        self.idle_slice = IDLE_SLICE
        addr = _libc.mmap(None, self.region_size, _PROT_READ_WRITE, _MAP_SHARED | _MAP_NORESERVE, fd, 0)
        if addr is None or addr == _MAP_FAILED:
            err = ctypes.get_errno()
            raise OSError(err, "stubvisor.ipc: map %s: %s" % (format_bytes(self.region_size), os.strerror(err)))
        self._addr = addr
        self._mv = _memory_view(addr, self.region_size, _PYBUF_WRITE)
        self._mv32 = _words32(self._mv)
        self._dead = ctypes.c_uint32.from_address(addr + CTL_DEAD)
        self._stub_pid = ctypes.c_uint32.from_address(addr + CTL_STUB_PID)
        # The supervisor's longer poll for a message while a CPU is spare.
        self._msg_poll = ctypes.c_uint32.from_address(addr + CTL_MSG_POLL)
        rings = (_Ring(addr, self._mv, header["ring0_off"], header["ring_bytes"], side == 0),
                 _Ring(addr, self._mv, header["ring1_off"], header["ring_bytes"], side == 1))
        arenas = (header["arena0_off"], header["arena1_off"])
        usage = (CTL_ARENA0_USAGE, CTL_ARENA1_USAGE)
        beats = (CTL_SUP_HEARTBEAT, CTL_STUB_HEARTBEAT)
        self._out, self._in = rings[side], rings[1 - side]
        # The peer's flag that it sleeps waiting for room on the ring this
        # side reads (its .value is true then); see wake_writer.
        self.writer_sleeping = self._in.writer_sleeping
        self._own_loc, self._peer_loc = side, 1 - side
        self._own_beat_addr = addr + beats[side]
        self._peer_beat = ctypes.c_uint64.from_address(addr + beats[1 - side])
        self._peer_arena = arenas[1 - side]
        self._peer_committed = _word64(addr + usage[1 - side])
        self._arena_max = header["arena_max"]
        self._peer_usage_addr = addr + usage[1 - side]
        self._send_lock = threading.Lock()
        self._recv_lock = threading.Lock()
        # The compiled fast path of each ring (stubvisor/native.py sets
        # FAST_RING when it loads): its pop and push do the usual frame
        # and leave everything else to the Python code below.
        self._fast_in = self._fast_out = None
        if FAST_RING is not None:
            self._fast_in = FAST_RING(self, self._in, _unpack_strict)
            self._fast_out = FAST_RING(self, self._out, _unpack_strict)
        self._packer = msgpack.Packer(use_bin_type=True, autoreset=True)
        self._ppid = os.getppid()
        try:
            self._arena = _Arena(fd, arenas[side], header["arena_max"], header["arena_default"],
                                 header["arena_growth"], addr + usage[side])
        except BaseException:
            self._unmap()
            raise

    # --- life cycle ---------------------------------------------------------

    @classmethod
    def attach(cls, fd=REGION_FD):
        """Attach to the region on fd (inherited from the supervisor): check
        magic and version, record this pid as the stub, commit arena 1.
        The Channel owns fd from now on."""
        try:
            h = _check_header(os.pread(fd, HEADER_SIZE, 0))
            if os.fstat(fd).st_size < h["arena0_off"]:
                raise ProtocolError("stubvisor.ipc: region file does not back its rings")
            # A file that could shrink could pull pages from under a view
            # (SIGBUS); the supervisor seals it.
            try:
                seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
            except OSError as e:
                raise ProtocolError("stubvisor.ipc: region is not a sealable memfd: %s" % e) from e
            if not seals & fcntl.F_SEAL_SHRINK:
                raise ProtocolError("stubvisor.ipc: region is not sealed against shrinking")
            ch = cls(fd, 1, h)
        except BaseException:
            os.close(fd)
            raise
        ch._stub_pid.value = os.getpid()
        return ch

    @classmethod
    def _create(cls, ring_bytes=1 << 20, spin_ns=50_000, arena_max=1 << 30,
                arena_default=1 << 20, arena_growth=1 << 20):
        """A new region on the supervisor side (tests only; the real
        supervisor is Go). Returns the Channel; its fd is ch.fd."""
        lay = layout(ring_bytes, spin_ns, arena_max, arena_default, arena_growth)
        fd = os.memfd_create("stubvisor-test", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
            _fallocate(fd, 0, lay["arena0_off"])
            hdr = bytearray(HEADER_SIZE)
            _write_header(hdr, lay)
            os.pwrite(fd, bytes(hdr), 0)
            return cls(fd, 0, _check_header(bytes(hdr)))
        except BaseException:
            os.close(fd)
            raise

    @property
    def fd(self):
        return self._fd

    def close(self):
        """Unmap the region and close the fd (idempotent). Views from
        view() and alloc() must not be used afterwards."""
        if self._closed:
            return
        self._closed = True
        if self._side == 0:
            self._dead.value = 1
            self._wake_all()
        else:
            # Wake this side's own waiters (a recv for new frames, a send
            # for room) so they see _closed now rather than after a slice.
            _futex_wake(self._in.tail_addr)
            _futex_wake(self._out.head_addr)
        # Take both locks so no send/recv is inside the mapping; their
        # waits notice _closed within one slice.
        with self._send_lock, self._recv_lock:
            self._unmap()

    def _unmap(self):
        try:
            self._mv32.release()
            self._mv.release()
        except BufferError:
            pass  # a caller still holds a buffer export; the mapping goes anyway
        _libc.munmap(self._addr, self.region_size)
        os.close(self._fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- liveness -----------------------------------------------------------

    def _check_alive(self):
        if self._closed:
            raise PeerDead("stubvisor.ipc: channel closed")
        if self._dead.value:
            raise PeerDead("stubvisor.ipc: the supervisor marked the region dead")
        if self._side == 1:
            ppid = os.getppid()
            if ppid != self._ppid:
                raise PeerDead("stubvisor.ipc: supervisor exited (parent pid %d is now %d)"
                               % (self._ppid, ppid))

    def peer_dead(self):
        """True once send/recv would raise PeerDead."""
        try:
            self._check_alive()
        except PeerDead:
            return True
        return False

    def marked_dead(self):
        """True once the supervisor marked the region dead."""
        return bool(self._dead.value)

    def mark_dead(self):
        """Set the dead word and wake every waiter (the supervisor's reaper;
        tests use it to play that role)."""
        self._dead.value = 1
        self._wake_all()

    def _wake_all(self):
        for r in (self._out, self._in):
            _futex_wake(r.tail_addr)
            _futex_wake(r.head_addr)

    def beat(self):
        """Increment this side's heartbeat word (the stub does it every
        heartbeat period, HEARTBEAT_ENV)."""
        _fetch_add8(self._own_beat_addr, 1, _SEQ_CST)

    def peer_heartbeat(self):
        return self._peer_beat.value

    # --- waiting --------------------------------------------------------------

    def _wait_change(self, load, old, futex_addr, flag_addr, deadline, which=0):
        """Wait until load() != old: poll while polling pays, then sleep
        on the futex in bounded slices after announcing the sleep in the
        flag (the producer wakes us only when the flag is set). Returns
        False when the deadline (a time.monotonic() value, or None) passes
        first. which picks the poll budget (0: a message, 1: room).

        The budget follows the recent waits, as ipc/spin.go explains: kept
        (and lifted to twice the wait) when the poll caught the change,
        set to twice the wait when a sleep ended sooner than spin_ns,
        halved when it ended later, and dropped to zero when the poller
        saw its own clock jump (it was descheduled: the CPU is contended,
        and polling only takes the slice the supervisor needs). No
        sched_yield: on a busy CPU it hands the core away for a slice."""
        limit = spin = self.spin_ns
        lifted = None
        if which == 0:
            longer = self._msg_poll.value
            if longer > limit:
                # The supervisor's longer poll while a CPU is spare: it
                # may take it back while this poll runs (it gave the CPU
                # to another stub), and the poll then ends as if its
                # budget had been the spin.
                lifted, limit = self._msg_poll, longer
        now = time.perf_counter_ns
        start = now()
        budget = min(self._budget[which], limit)
        if budget:
            end = start + budget
            if deadline is not None:
                end = min(end, start + int((deadline - time.monotonic()) * 1e9))
            dead = self._dead
            last = start
            while True:
                for _ in range(8):
                    if load() != old:
                        waited = now() - start
                        self._budget[which] = min(limit, max(budget, 2 * waited))
                        return True
                t = now()
                if t - last > _PREEMPT_GAP_NS:
                    self._budget[which] = 0
                    break
                last = t
                if dead.value or self._closed or t >= end:
                    break
                if lifted is not None and t - start >= spin and not lifted.value:
                    break
        slice_ = self.idle_slice if deadline is None else WAIT_SLICE
        while True:
            self._check_alive()
            wait = slice_
            if deadline is not None:
                rem = deadline - time.monotonic()
                if rem <= 0:
                    # A timeout tells only that the answer is later than
                    # the wait: news when the wait outlasted the limit.
                    if now() - start >= limit:
                        self._learn(which, limit, limit)
                    return load() != old
                wait = min(wait, rem)
            _xchg4(flag_addr, 1, _SEQ_CST)
            if self._dead.value:
                # Marked dead after _check_alive: the mark's wake-up may
                # have come before this sleep, and it leaves the futex
                # word as it was, so look again rather than sleep a slice.
                _xchg4(flag_addr, 0, _SEQ_CST)
                continue
            if load() != old:
                _xchg4(flag_addr, 0, _SEQ_CST)
                self._learn(which, now() - start, limit)
                return True
            _futex_wait(futex_addr, old, wait)
            _xchg4(flag_addr, 0, _SEQ_CST)
            if load() != old:
                self._learn(which, now() - start, limit)
                return True

    def _learn(self, which, waited, limit):
        """Adjust a poll budget after a wait that ended asleep."""
        if waited < limit:
            b = 2 * waited
            b = limit if b > limit else b
        else:
            b = self._budget[which] // 2
        self._budget[which] = b if b >= _MIN_BUDGET_NS else 0

    def wait_message(self, timeout):
        """Sleep until a message is queued, timeout seconds pass, or
        another thread of this process calls wake_waiter(); True when a
        message is queued. The caller holds recv_lock and reads after it.
        No poll first: it is for a thread with other work to look at
        between sleeps (the event loop of async_exec calls, bls.py). A
        wake_waiter() that comes just before the sleep is missed: the
        sleep then lasts its timeout."""
        if self._closed:
            raise PeerDead("stubvisor.ipc: channel closed")
        r = self._in
        head = r.cursor
        tail = r.load_tail()
        if tail != head or timeout <= 0:
            return tail != head
        self._check_alive()
        _xchg4(r.reader_sleeping_addr, 1, _SEQ_CST)
        if r.load_tail() == tail and not self._dead.value:
            _futex_wait(r.tail_addr, tail, timeout)
        _xchg4(r.reader_sleeping_addr, 0, _SEQ_CST)
        return r.load_tail() != head

    def wake_waiter(self):
        """End another thread's wait_message early."""
        _futex_wake(self._in.tail_addr)

    # --- messages -------------------------------------------------------------

    def send(self, msg, wake=True):
        """Encode msg (a list: [kind, id, ...]) and queue it for the
        supervisor. Blocks while the ring is full; raises PeerDead. With
        wake False the caller calls wake_reader() later (one wake-up for
        several messages)."""
        fast = self._fast_out
        with self._send_lock:
            if self._closed or self._dead.value:
                self._refuse()
            data = self._packer.pack(msg)
            if fast is None or not fast.push_held(data):
                self._push(data)
        if wake and self._out.reader_sleeping.value:
            _futex_wake(self._out.tail_addr)

    def wake_reader(self):
        """After send(wake=False): wake the supervisor if it sleeps."""
        if self._out.reader_sleeping.value:
            _futex_wake(self._out.tail_addr)

    def send_frame(self, data):
        """Queue a message already encoded as msgpack bytes (see
        fastwire); otherwise as send."""
        fast = self._fast_out
        if fast is not None and fast.push(data):
            return
        r = self._out
        lock = self._send_lock
        lock.acquire()
        try:
            if self._closed or self._dead.value:
                self._refuse()
            # _push inline, for the usual small frame.
            n = len(data)
            need = (n + 11) & -8
            tail = r.cursor
            pos = tail & r.mask
            if pos + need > r.size or tail + need - r.head.value > r.size or n > r.max_frame or not _PLAIN_LOADS:
                self._push(data)
            else:
                start = r.data_off + pos
                self._mv32[start >> 2] = n
                start += FRAME_HEADER_BYTES
                self._mv[start:start + n] = data
                tail += need
                r.cursor = tail
                r.own.value = tail
        finally:
            lock.release()
        if r.reader_sleeping.value:
            _futex_wake(r.tail_addr)

    def _refuse(self):
        if self._closed:
            raise PeerDead("stubvisor.ipc: channel closed")
        raise PeerDead("stubvisor.ipc: the supervisor marked the region dead")

    def _push(self, data):
        """Queue one frame; the caller holds the send lock, and once it
        released it, wakes the reader if its flag says it sleeps.

        On x86-64 the new tail is a plain store here: releasing the send
        lock is a locked read-modify-write, the full fence between this
        store and the caller's load of the flag (the reader either sees
        the new tail before it sleeps, or the caller sees its flag), so
        the store needs no fence of its own. Elsewhere publish() is the
        sequentially consistent exchange."""
        r = self._out
        n = len(data)
        need = (n + 11) & -8  # (FRAME_HEADER_BYTES + n) rounded up to FRAME_ALIGN
        tail = r.cursor
        pos = tail & r.mask
        size = r.size
        if pos + need > size or tail + need - r.head.value > size or n > r.max_frame:
            return self._push_slow(data)
        # The common case, inline: the frame fits before the end of
        # the ring and there is room for it.
        start = r.data_off + pos
        self._mv32[start >> 2] = n
        start += FRAME_HEADER_BYTES
        self._mv[start:start + n] = data
        tail += need
        r.cursor = tail
        if _PLAIN_LOADS:
            r.own.value = tail
        else:
            r.publish(tail)

    def _check_open(self):
        if self._closed:
            raise PeerDead("stubvisor.ipc: channel closed")

    def _push_slow(self, data):
        """Queue a frame that must wrap or wait for room."""
        r = self._out
        n = len(data)
        if n > r.max_frame:
            raise FrameTooLarge("stubvisor.ipc: %d-byte message, the ring takes %d: frame too large"
                             % (n, r.max_frame))
        need = (n + 11) & -8  # (FRAME_HEADER_BYTES + n) rounded up to FRAME_ALIGN
        tail = r.cursor
        pos = tail & r.mask
        room = r.size - pos
        total = need if room >= need else room + need
        while True:
            head = r.head.value
            used = tail - head
            if used < 0 or used > r.size:
                raise ProtocolError("stubvisor.ipc: ring indices head %d tail %d" % (head, tail))
            if r.size - used >= total:
                break
            if r.reader_sleeping.value:
                # Frames sent with wake False (send) are still unread.
                _futex_wake(r.tail_addr)
            self._wait_change(r.load_head, head, r.head_addr, r.writer_sleeping_addr, None, 1)
        mv = self._mv
        start = r.data_off + pos
        if room < need:
            self._mv32[start >> 2] = WRAP_MARKER
            tail += room
            start = r.data_off
        self._mv32[start >> 2] = n
        start += FRAME_HEADER_BYTES
        mv[start:start + n] = data
        tail += need
        r.cursor = tail
        r.publish(tail)
        if r.reader_sleeping.value:
            _futex_wake(r.tail_addr)

    def recv(self, timeout=None):
        """The next message from the supervisor as a list, or None when
        timeout seconds pass first (None waits without limit). Raises
        PeerDead when the supervisor is gone, ProtocolError on a bad frame
        (which is consumed)."""
        lock = self._recv_lock
        lock.acquire()
        try:
            return self.recv_held(timeout)
        finally:
            lock.release()

    @property
    def recv_lock(self):
        """The lock recv holds; see recv_held."""
        return self._recv_lock

    def recv_held(self, timeout=None, fenced=True):
        """recv for a caller that already holds recv_lock: the stub's host
        reads under it, one lock a message instead of two (close takes it
        too, so no read is inside the mapping when it goes).

        With fenced False the new head is, on x86-64, a plain store: the
        caller releases recv_lock (a locked read-modify-write, which x86
        orders as a full fence) and then calls wake_writer(), as _push
        and send do with the send lock."""
        if self._closed:
            raise PeerDead("stubvisor.ipc: channel closed")
        fast = self._fast_in
        if fast is not None:
            msg = fast.pop(fenced)
            if msg is not None:
                return msg
        r = self._in
        deadline = None
        while True:
            head = r.cursor
            tail = r.tail.value
            if tail == head:
                if deadline is None and timeout is not None:
                    deadline = time.monotonic() + timeout
                if not self._wait_change(r.load_tail, tail, r.tail_addr,
                                         r.reader_sleeping_addr, deadline):
                    return None
                continue
            avail = tail - head
            pos = head & r.mask
            start = r.data_off + pos
            n = self._mv32[start >> 2]
            need = (n + 11) & -8  # (FRAME_HEADER_BYTES + n) rounded up to FRAME_ALIGN
            # One test for the usual frame; a wrap marker (whose need is
            # past any ring) and anything wrong are sorted out inside.
            if need > avail or pos + need > r.size or avail > r.size or n > r.max_frame:
                if avail < 0 or avail > r.size:
                    raise ProtocolError("stubvisor.ipc: ring indices head %d tail %d" % (head, tail))
                if n == WRAP_MARKER:
                    skip = r.size - pos
                    if skip > avail:
                        raise ProtocolError("stubvisor.ipc: wrap marker with %d bytes queued" % avail)
                    self._consumed(r, head + skip)
                    continue
                raise ProtocolError("stubvisor.ipc: frame of %d bytes with %d queued" % (n, avail))
            start += FRAME_HEADER_BYTES
            try:
                msg = _unpack_strict(self._mv[start:start + n])
            except ValueError:
                try:
                    msg = _unpackb(self._mv[start:start + n], raw=False, strict_map_key=False)
                except Exception as e:
                    self._consumed(r, head + need)
                    raise ProtocolError("stubvisor.ipc: undecodable frame: %s" % e) from e
            except Exception as e:
                self._consumed(r, head + need)
                raise ProtocolError("stubvisor.ipc: undecodable frame: %s" % e) from e
            # Inline _consumed: this is the hot path.
            head += need
            r.cursor = head
            if fenced or not _PLAIN_LOADS:
                r.publish(head)
                if r.writer_sleeping.value:
                    _futex_wake(r.head_addr)
            else:
                r.own.value = head
            if type(msg) is not list or len(msg) < 2:
                raise ProtocolError("stubvisor.ipc: frame is not a message array")
            return msg

    def wake_writer(self):
        """After recv_held(fenced=False) and the release of recv_lock: wake
        the supervisor if it sleeps waiting for room. A caller may look
        at writer_sleeping.value first and call this only when it is set."""
        r = self._in
        if _PLAIN_LOADS and r.writer_sleeping.value:
            _futex_wake(r.head_addr)

    def _consumed(self, r, head):
        r.cursor = head
        r.publish(head)
        if r.writer_sleeping.value:
            _futex_wake(r.head_addr)

    # --- memory ---------------------------------------------------------------

    def alloc(self, size):
        """Reserve size bytes in this side's arena and return the offset
        (relative to the arena, as tensor descriptors carry it). Raises
        PoolExhausted, whose message names the limit and the setting."""
        self._check_open()
        return self._arena.alloc(size)

    def free(self, offset):
        """Return a block of this side's arena (on a Release message)."""
        self._check_open()
        self._arena.free(offset)

    def view(self, loc, offset, size):
        """A writable memoryview of size bytes at offset in arena loc,
        checked against the arena's maximum, its committed size and the
        region file. Raises ValueError for a range outside them."""
        if self._closed:
            raise PeerDead("stubvisor.ipc: channel closed")
        if loc == self._own_loc:
            base, committed = self._arena.base, self._arena.committed
        elif loc == self._peer_loc:
            base, committed = self._peer_arena, self._peer_committed.value
        elif loc == LOC_NONE and size == 0:
            return self._mv[0:0]
        else:
            raise ValueError("stubvisor.ipc: view of location %r with %r bytes" % (loc, size))
        end = offset + size
        if offset < 0 or size < 0 or end > committed or end > self._arena_max:
            if offset < 0 or size < 0:
                raise ValueError("stubvisor.ipc: view [%d, +%d): negative" % (offset, size))
            if end > self._arena_max:
                raise ValueError("stubvisor.ipc: view [%d, +%d) past the arena maximum of %s"
                                 % (offset, size, format_bytes(self._arena_max)))
            raise ValueError("stubvisor.ipc: view [%d, +%d) past the arena's %s committed"
                             % (offset, size, format_bytes(committed)))
        end += base
        if end > self._known_size:
            # The file only grows; look again only when a range passes
            # what we last saw (the peer grew its arena).
            self._known_size = os.fstat(self._fd).st_size
            if end > self._known_size:
                raise ValueError("stubvisor.ipc: view [%d, +%d) past the region file" % (offset, size))
        return self._mv[base + offset:end]

    _known_size = 0

    def peer_offset(self, ptr, size):
        """The offset in the peer's arena of the size bytes at address ptr
        of this process, or None when they are not inside it."""
        base = self._addr + self._peer_arena
        off = ptr - base
        if 0 <= off and off + size <= self._peer_committed.value:
            return off
        return None

    def usage(self):
        """(own, peer) arena figures: dicts of committed, in_use,
        high_water, max."""
        w = [ctypes.c_uint64.from_address(self._peer_usage_addr + 8 * i).value for i in range(3)]
        peer = {"committed": w[0], "in_use": w[1], "high_water": w[2], "max": self.header["arena_max"]}
        return self._arena.usage(), peer

    @property
    def max_frame(self):
        """The largest message send() takes."""
        return self._out.max_frame

    def depths(self):
        """Bytes queued on the outgoing and incoming rings."""
        return self._out.depth(), self._in.depth()
