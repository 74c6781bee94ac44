"""Tests of stubvisor.ipc over a real memfd region in this process.

A Channel on the supervisor side (side 0, which exists for these tests)
and a stub Channel attached to a duplicate of the same fd talk through the
real rings and arenas. Cross-process and Go<->Python behaviour is covered
by the Go tests in ipc/ (TestRoundTrip, TestPeerKilled, ...).
"""

import ctypes
import itertools
import os
import threading
import time
import unittest
from unittest import mock

from stubvisor import ipc

KIB = 1 << 10
MIB = 1 << 20


def open_fds():
    return set(os.listdir("/proc/self/fd"))


def no_leaks(test):
    """Fail the test if it leaves a file descriptor or a /dev/shm entry
    behind (the cleanup runs after every cleanup registered later)."""
    fds, shm = open_fds(), set(os.listdir("/dev/shm"))

    def check():
        test.assertLessEqual(open_fds(), fds, "leaked file descriptors")
        test.assertLessEqual(set(os.listdir("/dev/shm")), shm, "left in /dev/shm")

    test.addCleanup(check)


def make_pair(test, **settings):
    no_leaks(test)
    sup = ipc.Channel._create(**settings)
    test.addCleanup(sup.close)
    stub = ipc.Channel.attach(os.dup(sup.fd))
    test.addCleanup(stub.close)
    return sup, stub


class ConstantsTest(unittest.TestCase):
    def test_kinds_and_locations(self):
        c = ipc.constants()
        self.assertEqual(c["MAGIC"].to_bytes(8, "little"), b"STUBVSR\0")
        self.assertEqual(c["KIND_EXECUTE"], 2)
        self.assertEqual(c["KIND_EXECUTE_DONE"], 67)
        self.assertEqual((c["LOC_ARENA0"], c["LOC_ARENA1"], c["LOC_NONE"]), (0, 1, 2))
        self.assertNotIn("WAIT_SLICE", c)  # a float, not a wire constant

    def test_layout_is_page_aligned(self):
        lay = ipc.layout(1 << 20, 50_000, 1 << 30, 1 << 20, 1 << 20)
        for k in ("ring1_off", "arena0_off", "arena1_off", "region_size"):
            self.assertEqual(lay[k] % ipc.PAGE_SIZE, 0, k)
        self.assertEqual(lay["arena1_off"] - lay["arena0_off"], 1 << 30)

    def test_format_bytes(self):
        cases = {0: "0 bytes", 4096: "4 KiB", 64 * MIB: "64 MiB", 1 << 30: "1 GiB",
                 MIB + 512 * KIB: "1.5 MiB", 4097: "4097 bytes"}
        for n, want in cases.items():
            with self.subTest(n=n):
                self.assertEqual(ipc.format_bytes(n), want)


class ChannelTest(unittest.TestCase):
    def test_round_trip_both_ways(self):
        sup, stub = make_pair(self)
        msgs = [
            [ipc.KIND_EXECUTE, 7, [[1, "r", "seq", 0, [["IN", 11, [1, 4], 0, 0, 16]], ["OUT"], "", 0]]],
            [ipc.KIND_INITIALIZE, 1, {"model_name": "m"}, {"decoupled": True, "n": -3}],
            [ipc.KIND_CANCEL, (1 << 64) - 1],
            # Keys other than strings: decoded again with any key allowed.
            [ipc.KIND_INITIALIZE, 2, {"model_name": "m"}, {"n": {1: "one", -2: [b"x"]}}],
        ]
        for m in msgs:
            sup.send(m)
            self.assertEqual(stub.recv(1), m)
        stub.send([ipc.KIND_LOG, 0, "info", "é" * 100, "model.py", 12])
        self.assertEqual(sup.recv(1), [ipc.KIND_LOG, 0, "info", "é" * 100, "model.py", 12])
        stub.send_frame(ipc.msgpack.packb([ipc.KIND_LOG, 0, "info", "pre-encoded", "model.py", 13]))
        self.assertEqual(sup.recv(1), [ipc.KIND_LOG, 0, "info", "pre-encoded", "model.py", 13])
        # An undecodable frame is consumed and refused; the next one reads.
        sup.send_frame(b"\xc1")
        with self.assertRaisesRegex(ipc.ProtocolError, "undecodable frame"):
            stub.recv(1)
        sup.send(msgs[0])
        self.assertEqual(stub.recv(1), msgs[0])

    def test_stub_pid_written_at_attach(self):
        sup, _ = make_pair(self)
        self.assertEqual(sup._stub_pid.value, os.getpid())

    def test_recv_timeout(self):
        _, stub = make_pair(self)
        for timeout in (0, 0.03):
            start = time.monotonic()
            self.assertIsNone(stub.recv(timeout))
            self.assertGreaterEqual(time.monotonic() - start, timeout)

    def test_wrap_around(self):
        sup, stub = make_pair(self, ring_bytes=ipc.MIN_RING_BYTES)
        max_frame = ipc.MIN_RING_BYTES // 2 - ipc.FRAME_HEADER_BYTES
        for i in range(500):
            text = "w" * ((i * 61) % (max_frame - 40))
            stub.send([ipc.KIND_LOG, 0, "info", text, "f", i])
            self.assertEqual(sup.recv(1), [ipc.KIND_LOG, 0, "info", text, "f", i])
        self.assertGreater(stub._out.load_tail(), 40 * ipc.MIN_RING_BYTES)

    def test_frame_too_large(self):
        _, stub = make_pair(self, ring_bytes=ipc.MIN_RING_BYTES)
        with self.assertRaisesRegex(ipc.FrameTooLarge, "frame too large"):
            stub.send([ipc.KIND_LOG, 0, "info", "x" * ipc.MIN_RING_BYTES, "f", 0])
        self.assertEqual(stub.depths(), (0, 0))

    def test_back_pressure(self):
        sup, stub = make_pair(self, ring_bytes=ipc.MIN_RING_BYTES)
        n = 200  # ~13 rings of 256-byte frames: the sender must wait
        errors = []

        def produce():
            try:
                for i in range(n):
                    stub.send([ipc.KIND_LOG, 0, "info", "p" * 230, "f", i])
            except Exception as e:  # reported below
                errors.append(e)

        t = threading.Thread(target=produce)
        t.start()
        for i in range(n):
            self.assertEqual(sup.recv(5)[5], i)
        t.join(10)
        self.assertFalse(t.is_alive())
        self.assertEqual(errors, [])

    def test_mark_dead_wakes_blocked_recv(self):
        sup, stub = make_pair(self)
        got = []

        def wait():
            try:
                stub.recv(10)
            except ipc.PeerDead as e:
                got.append((time.monotonic(), e))

        t = threading.Thread(target=wait)
        t.start()
        flag = ipc._loader32(stub._in.reader_sleeping_addr)
        deadline = time.monotonic() + 10
        while not flag() and time.monotonic() < deadline:
            os.sched_yield()  # the waiter announces its sleep on its own
        marked = time.monotonic()
        sup.mark_dead()
        t.join(10)
        self.assertEqual(len(got), 1)
        self.assertLess(got[0][0] - marked, 0.1)
        self.assertTrue(stub.peer_dead())
        with self.assertRaises(ipc.PeerDead):
            stub.send([ipc.KIND_LOG, 0, "", "", "", 0])

    def test_corrupt_ring_indices(self):
        sup, stub = make_pair(self)
        # A tail more than a ring ahead, or a frame longer than what is
        # queued, can only come from a broken peer.
        ctypes.c_uint64.from_address(stub._in.tail_addr).value = 3 << 20
        with self.assertRaisesRegex(ipc.ProtocolError, "ring indices"):
            stub.recv(0)
        ctypes.c_uint64.from_address(stub._in.tail_addr).value = 8
        ipc._U32.pack_into(stub._mv, stub._in.data_off, 1 << 20)
        with self.assertRaisesRegex(ipc.ProtocolError, "frame of"):
            stub.recv(0)

    def test_attach_rejects_unsealed_file(self):
        no_leaks(self)
        fd = os.memfd_create("unsealed", os.MFD_CLOEXEC)
        lay = ipc.layout(1 << 20, 0, 1 << 20, 1 << 20, 1 << 20)
        hdr = bytearray(ipc.HEADER_SIZE)
        ipc._write_header(hdr, lay)
        os.pwrite(fd, bytes(hdr), 0)
        os.ftruncate(fd, lay["arena0_off"])
        with self.assertRaisesRegex(ipc.ProtocolError, "sealable|sealed"):
            ipc.Channel.attach(fd)

    def test_heartbeat(self):
        sup, stub = make_pair(self)
        for _ in range(3):
            stub.beat()
        self.assertEqual(sup.peer_heartbeat(), 3)

    def test_poll_budget_follows_waits(self):
        """The poll budget: halved by late answers, set to twice a short
        sleep, never above spin_ns, zero below a microsecond."""
        _, stub = make_pair(self)
        limit = stub.spin_ns
        cases = [
            ("a late answer halves it", [10 * limit], limit // 2),
            ("late answers drop it to zero", [10 * limit] * 8, 0),
            ("a sleep that ended soon sets twice it", [10 * limit, limit // 4], limit // 2),
            ("never above the limit", [limit - 1], limit),
        ]
        for name, waits, want in cases:
            with self.subTest(name):
                stub._budget[0] = limit
                for w in waits:
                    stub._learn(0, w, limit)
                self.assertEqual(stub._budget[0], want)

    def test_msg_poll_word_lifts_the_limit(self):
        """The supervisor's msg_poll word lifts the limit of a wait for a
        message above spin_ns, so a budget learnt up to it is kept; at
        zero the limit is spin_ns again and the budget is cut to it."""
        _, stub = make_pair(self)
        long_ns = 20 * stub.spin_ns
        r = stub._in
        for name, poll, want in [("lifted", long_ns, long_ns), ("not set", 0, stub.spin_ns)]:
            with self.subTest(name):
                stub._msg_poll.value = poll
                stub._budget[0] = long_ns
                # A change already there: the poll's first look sees it.
                self.assertTrue(stub._wait_change(lambda: 1, 0, r.tail_addr, r.reader_sleeping_addr, None, 0))
                self.assertEqual(stub._budget[0], want)

    def test_msg_poll_taken_back(self):
        """A poll on the supervisor's longer limit ends once the word is
        set back to zero (the supervisor gave the CPU to another stub):
        the wait goes to sleep after about its spin, not the limit. The
        poll's clock is a fake one, a microsecond a read, so no
        preemption (which also ends a poll early) can hide a poll that
        ignores the word."""
        _, stub = make_pair(self)
        r = stub._in
        flag = ipc._loader32(r.reader_sleeping_addr)
        stub._msg_poll.value = stub._budget[0] = 20_000_000  # 20 ms
        looks = []

        def load():
            if not looks:  # taken back as soon as the poll begins
                stub._msg_poll.value = 0
            looks.append(None)
            return 1 if flag() else 0  # the change comes once it sleeps

        clock = itertools.count(0, 1000)
        with mock.patch.object(ipc.time, "perf_counter_ns", lambda: next(clock)):
            self.assertTrue(stub._wait_change(load, 0, r.tail_addr, r.reader_sleeping_addr, None, 0))
        # 8 looks a clock read: the spin (50 µs) is about 400 looks, the
        # 20 ms limit about 160,000.
        self.assertLess(len(looks), 8 * 4 * stub.spin_ns // 1000)

    def test_poll_skipped_when_budget_zero(self):
        """With no budget a wait sleeps at once, and a message that
        arrives wakes it."""
        sup, stub = make_pair(self)
        stub._budget[0] = 0
        t = threading.Timer(0.05, lambda: sup.send([ipc.KIND_EXECUTE, 7]))
        t.start()
        self.addCleanup(t.join)
        msg = stub.recv(5)
        self.assertEqual(msg[:2], [ipc.KIND_EXECUTE, 7])

    def test_close_is_idempotent(self):
        _, stub = make_pair(self)
        stub.close()
        stub.close()
        with self.assertRaises(ipc.PeerDead):
            stub.recv(0)

    def test_attach_rejects(self):
        cases = {
            "magic": (ipc.HDR_MAGIC, b"NOTSTUBV", "not a stubvisor region"),
            "version": (ipc.HDR_VERSION, (ipc.PROTOCOL_VERSION + 1).to_bytes(4, "little"), "protocol version"),
            "ring size": (ipc.HDR_RING_BYTES, (5000).to_bytes(4, "little"), "power of two"),
            "moved arena": (ipc.HDR_ARENA1_OFF, (12345 * 4096).to_bytes(8, "little"), "layout"),
        }
        no_leaks(self)
        for name, (off, data, msg) in cases.items():
            with self.subTest(name):
                sup = ipc.Channel._create()
                self.addCleanup(sup.close)
                os.pwrite(sup.fd, data, off)
                fd = os.dup(sup.fd)
                with self.assertRaisesRegex(ipc.ProtocolError, msg):
                    ipc.Channel.attach(fd)
                with self.assertRaises(OSError):
                    os.fstat(fd)  # attach closed it


class ArenaTest(unittest.TestCase):
    def test_first_fit_and_coalescing(self):
        sup, stub = make_pair(self, arena_default=64 * KIB, arena_growth=64 * KIB, arena_max=MIB)
        a = [stub.alloc(64) for _ in range(4)]
        self.assertEqual(a, [0, 64, 128, 192])
        self.assertEqual(stub.alloc(1), 256)
        self.assertEqual(stub.alloc(0), 320)
        stub.free(a[0])
        stub.free(a[2])
        self.assertEqual(stub.alloc(65), 384)  # the 64-byte holes are too small
        stub.free(a[1])  # joins both holes: [0, 192)
        self.assertEqual(stub.alloc(192), 0)
        with self.assertRaisesRegex(ValueError, "no block allocated"):
            stub.free(a[0] + 64)

    def test_growth_and_published_usage(self):
        sup, stub = make_pair(self, arena_default=64 * KIB, arena_growth=64 * KIB, arena_max=MIB)
        stub.alloc(60 * KIB)
        stub.alloc(8 * KIB)
        own, _ = stub.usage()
        self.assertEqual(own["committed"], 128 * KIB)
        off = stub.alloc(300 * KIB)
        _, peer = sup.usage()  # what the supervisor reads
        self.assertEqual(peer["committed"], (off + 300 * KIB + 4095) // 4096 * 4096)
        self.assertEqual(peer["in_use"], 60 * KIB + 8 * KIB + 300 * KIB)
        self.assertEqual(peer["high_water"], peer["in_use"])
        self.assertGreaterEqual(os.fstat(stub.fd).st_size, stub.header["arena1_off"] + peer["committed"])

    def test_exhausted_names_the_limit(self):
        _, stub = make_pair(self, arena_max=64 * MIB)
        with self.assertRaises(ipc.PoolExhausted) as cm:
            stub.alloc(80 * MIB)
        self.assertEqual(str(cm.exception),
                         "shmpool: allocate 80 MiB: pool maximum of 64 MiB reached, 0 bytes in use "
                         "(raise --shm-max-byte-size): pool exhausted")

    def test_views_across_growth(self):
        sup, stub = make_pair(self, arena_default=64 * KIB, arena_growth=64 * KIB, arena_max=64 * MIB)
        first = stub.alloc(100)
        stub.view(ipc.LOC_ARENA1, first, 100)[:] = b"k" * 100
        held = sup.view(ipc.LOC_ARENA1, first, 100)
        big = stub.alloc(10 * MIB)
        stub.view(ipc.LOC_ARENA1, big, 10 * MIB)[-1:] = b"z"
        self.assertEqual(bytes(sup.view(ipc.LOC_ARENA1, big, 10 * MIB)[-1:]), b"z")
        self.assertEqual(bytes(held), b"k" * 100)

    def test_view_bounds(self):
        sup, stub = make_pair(self, arena_default=64 * KIB, arena_growth=64 * KIB, arena_max=MIB)
        cases = {
            "past committed": (ipc.LOC_ARENA1, 64 * KIB, 1),
            "past the maximum": (ipc.LOC_ARENA0, MIB, 1),
            "negative": (ipc.LOC_ARENA0, -1, 2),
            "unknown location": (7, 0, 0),
            "none with bytes": (ipc.LOC_NONE, 0, 1),
        }
        for name, (loc, off, size) in cases.items():
            with self.subTest(name):
                with self.assertRaises(ValueError):
                    stub.view(loc, off, size)
        self.assertEqual(len(stub.view(ipc.LOC_NONE, 99, 0)), 0)
        self.assertEqual(len(stub.view(ipc.LOC_ARENA0, 0, 64 * KIB)), 64 * KIB)

    def test_lying_peer_committed_is_refused(self):
        sup, stub = make_pair(self, arena_default=64 * KIB, arena_growth=64 * KIB, arena_max=MIB)
        # The stub's committed word claims bytes the file lacks (arena 1
        # is the last part of the file): a view there must fail, not SIGBUS.
        ctypes.c_uint64.from_address(sup._addr + ipc.CTL_ARENA1_USAGE).value = MIB
        with self.assertRaisesRegex(ValueError, "past the region file"):
            sup.view(ipc.LOC_ARENA1, 512 * KIB, 64)

if __name__ == "__main__":
    unittest.main()
