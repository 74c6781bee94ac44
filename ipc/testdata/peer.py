"""A Python stub-side peer for the ipc tests and the ipc benchmark.

Usage: peer.py ROLE   (the region on fd 3; orphan roles report on fd 4)

It attaches with stubvisor.ipc exactly as the real stub does, announces
itself with a Hello frame, then plays ROLE:

  echo          send every message back unchanged; Finalize ends it
  serve         Execute: copy each input into this side's arena and return
                it as an output; Release: free; IsReady: reply with the
                arena's bytes in use; keeps a view of the first small input
                and fails later executes if its bytes ever change
  flood         send Log frames as fast as possible, forever
  sink          receive and drop frames forever
  stall         never read again (the ring fills up); wait for SIGKILL
  orphan-recv   block in recv until the supervisor dies, report on fd 4
  orphan-send   send until the ring is full and the supervisor dies, report
  bench-echo    answer Execute with an ExecuteDone naming the same bytes
  bench-stream  count frames; on Finalize reply Result(count)
  bench-big     serve without the held view (the benchmark rewrites its input)
  uds-echo      the bench-echo exchange over the Unix socket on fd 4, the
                payload inline; ends at EOF
"""

import os
import signal
import socket
import struct
import sys
import time

from stubvisor import ipc

ERROR_INTERNAL = 13


def hello(ch, role):
    ch.send([ipc.KIND_HELLO, 0, ipc.PROTOCOL_VERSION, os.getpid(), {"role": role}])


def echo(ch):
    while True:
        m = ch.recv(None)
        if m[0] == ipc.KIND_FINALIZE:
            ch.send([ipc.KIND_RESULT, m[1], None, None])
            return
        ch.send(m)


def serve(ch, hold=True):
    held = None  # (view, saved bytes) of the first small input
    while True:
        m = ch.recv(None)
        kind = m[0]
        if kind == ipc.KIND_EXECUTE:
            responses = []
            for req in m[2]:
                handle, inputs = req[0], req[4]
                outputs, err = [], None
                try:
                    if held is not None and bytes(held[0]) != held[1]:
                        raise ValueError("a held view of arena 0 changed")
                    for name, dtype, shape, loc, off, size in inputs:
                        src = ch.view(loc, off, size)
                        if hold and held is None and size <= 1 << 20:
                            held = (src, bytes(src))
                        out = ch.alloc(size)
                        ch.view(ipc.LOC_ARENA1, out, size)[:] = src
                        outputs.append([name, dtype, shape, ipc.LOC_ARENA1, out, size])
                except Exception as e:  # reported to the test, which fails
                    err = [ERROR_INTERNAL, "%s: %s" % (type(e).__name__, e)]
                    outputs = []
                responses.append([handle, ipc.FLAG_FINAL, err, outputs, ""])
            ch.send([ipc.KIND_EXECUTE_DONE, m[1], None, responses])
        elif kind == ipc.KIND_RELEASE:
            for off in m[2]:
                ch.free(off)
        elif kind == ipc.KIND_IS_READY:
            own, _ = ch.usage()
            ch.send([ipc.KIND_RESULT, m[1], None, own["in_use"]])
        elif kind == ipc.KIND_FINALIZE:
            ch.send([ipc.KIND_RESULT, m[1], None, None])
            return


def flood(ch):
    line = 0
    while True:
        ch.send([ipc.KIND_LOG, 0, "info", "flood", "peer.py", line])
        line += 1


def sink(ch):
    while True:
        ch.recv(None)


def orphan(ch, sending):
    try:
        if sending:
            while True:
                ch.send([ipc.KIND_LOG, 0, "info", "x" * 200, "peer.py", 0])
        else:
            while True:
                ch.recv(None)
    except ipc.PeerDead as e:
        now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        os.write(4, ("dead %d %s\n" % (now, e)).encode())


def bench_echo(ch):
    while True:
        m = ch.recv(None)
        if m[0] == ipc.KIND_EXECUTE:
            for r in m[2]:
                for t in r[4]:
                    ch.view(t[3], t[4], t[5])  # as the stub host maps each input
            ch.send([ipc.KIND_EXECUTE_DONE, m[1], None,
                     [[r[0], ipc.FLAG_FINAL, None, r[4], ""] for r in m[2]]])
        elif m[0] == ipc.KIND_FINALIZE:
            ch.send([ipc.KIND_RESULT, m[1], None, None])
            return


def bench_stream(ch):
    count = 0
    while True:
        m = ch.recv(None)
        if m[0] == ipc.KIND_FINALIZE:
            ch.send([ipc.KIND_RESULT, m[1], None, count])
            return
        count += 1


def uds_echo(ch):
    """Frames: u32 message length, u32 payload length, message, payload."""
    sock = socket.socket(fileno=4)
    hdr = struct.Struct("<II")
    buf = bytearray(1 << 16)
    view = memoryview(buf)
    packer = ipc.msgpack.Packer(use_bin_type=True, autoreset=True)
    while True:
        got = 0
        while got < 8 or got < 8 + sum(hdr.unpack_from(buf, 0)):
            n = sock.recv_into(view[got:])
            if n == 0:
                return
            got += n
        mlen, plen = hdr.unpack_from(buf, 0)
        m = ipc.msgpack.unpackb(view[8:8 + mlen], raw=False)
        payload = view[8 + mlen:8 + mlen + plen]
        reply = packer.pack([ipc.KIND_EXECUTE_DONE, m[1], None,
                             [[r[0], ipc.FLAG_FINAL, None, r[4], ""] for r in m[2]]])
        sock.sendall(hdr.pack(len(reply), plen) + reply + payload)


def main():
    role = sys.argv[1]
    ch = ipc.Channel.attach(3)
    hello(ch, role)
    try:
        {
            "echo": echo,
            "serve": serve,
            "bench-big": lambda c: serve(c, hold=False),
            "flood": flood,
            "sink": sink,
            "stall": lambda c: signal.pause(),
            "orphan-recv": lambda c: orphan(c, False),
            "orphan-send": lambda c: orphan(c, True),
            "bench-echo": bench_echo,
            "bench-stream": bench_stream,
            "uds-echo": uds_echo,
        }[role](ch)
    except ipc.PeerDead:
        pass
    finally:
        ch.close()


if __name__ == "__main__":
    main()
