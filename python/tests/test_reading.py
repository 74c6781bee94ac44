"""The reader lock's hand-over: a command that a thread other than the
main one reads from the ring (a BLS call pumping, the heartbeat's drain,
the event loop reading its async_exec answers) reaches the main thread
even when no other message follows it. The main thread looks at its
command queue under the reader lock and then sleeps on the ring, so a
reader that queued the command only after letting go of the lock could
leave it asleep with the command queued (a decoupled model's next request
then waited for an unrelated message)."""

import os
import queue
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from stubvisor import ipc  # noqa: E402

from .stubharness import WAIT, add_sub_host  # noqa: E402


class _GatedReader:
    """The host's reader lock, which pauses the reading thread right after
    it lets go of the lock with the command read: until the main thread
    has taken the command, or sleeps on the ring without it."""

    def __init__(self, host, ring_empty):
        self.lock = host._reader
        self.ring_empty = ring_empty
        self.reader = None  # the thread under test
        self.sent = threading.Event()
        self.go = threading.Event()  # the main thread may look now
        self.took = threading.Event()  # the main thread has the command
        self.sleeping = host.ch._in.reader_sleeping

    def acquire(self, *args, **kwargs):
        return self.lock.acquire(*args, **kwargs)

    def release(self):
        self.lock.release()
        if threading.current_thread() is not self.reader or self.go.is_set():
            return
        if not (self.sent.is_set() and self.ring_empty()):
            return
        self.go.set()
        deadline = time.monotonic() + WAIT
        while not self.took.is_set() and not self.sleeping.value and time.monotonic() < deadline:
            time.sleep(0.001)


class HandOverTest(unittest.TestCase):
    def test_command_read_by_another_thread(self):
        stop = threading.Event()
        cases = {
            "a BLS call pumping (_wait)": lambda host, gate: host._wait(stop.is_set),
            "the heartbeat's drain": lambda host, gate: gate.sent.wait(WAIT) and host._drain(),
            "the event loop's read": lambda host, gate: gate.sent.wait(WAIT) and host._loop_read(object(), WAIT),
        }
        for name, read in cases.items():
            with self.subTest(name):
                stop.clear()
                sup, host = add_sub_host(self)
                ring = host.ch._in
                taken = queue.Queue()
                gate = _GatedReader(host, lambda: ring.cursor == ring.load_tail())
                host._reader = gate
                gate.reader = threading.Thread(target=read, args=(host, gate), daemon=True)

                def main_thread():
                    if gate.go.wait(WAIT):
                        taken.put(host._next_command())
                        gate.took.set()

                main = threading.Thread(target=main_thread, daemon=True)
                gate.reader.start()
                main.start()

                def unblock(main=main, reader=gate.reader, sup=sup):
                    stop.set()
                    if main.is_alive():
                        # A message of no consequence wakes a main thread
                        # left asleep on the ring.
                        sup.send([ipc.KIND_RELEASE, 0, []])
                    main.join(WAIT)
                    reader.join(WAIT)

                self.addCleanup(unblock)
                command = [ipc.KIND_EXECUTE, 7, []]
                sup.send(command)
                gate.sent.set()
                try:
                    got = taken.get(timeout=2)
                except queue.Empty:
                    self.fail("the main thread did not get the command another thread read")
                self.assertEqual(got[:2], command[:2])
                unblock()

    def _main_awaiting_loop(self, sup, host):
        """Start the main thread of a decoupled model with an async_exec
        call open and wait until it waits for the loop (without the
        reader lock); returns the queue it puts its next command in."""
        host._loop_reads = True
        host._async_open = 1
        taken = queue.Queue()
        main = threading.Thread(target=lambda: taken.put(host._next_command()), daemon=True)
        main.start()

        def unblock():
            if main.is_alive():
                host._async_open = 0
                host._main_wake.set()
                sup.send([ipc.KIND_RELEASE, 0, []])  # for a main thread back on the ring
            main.join(WAIT)

        self.addCleanup(unblock)
        deadline = time.monotonic() + WAIT
        while not host._main_wake._cond._waiters:
            self.assertLess(time.monotonic(), deadline, "the main thread did not wait for the loop")
            time.sleep(0.001)
        return taken

    def test_loop_reads_while_a_decoupled_models_calls_are_open(self):
        """A decoupled model's main thread leaves the channel to its event
        loop while async_exec calls are open: the loop's read gets the
        reader lock and hands the command it read to the main thread."""
        sup, host = add_sub_host(self)
        taken = self._main_awaiting_loop(sup, host)
        self.assertFalse(host._reader.locked())
        command = [ipc.KIND_EXECUTE, 8, []]
        sup.send(command)
        self.assertTrue(host._loop_read(object(), WAIT), "the loop's read did not get the reader lock")
        got = taken.get(timeout=WAIT)
        self.assertEqual(got[:2], command[:2])

    def test_main_thread_reads_again_once_the_calls_end(self):
        """When a decoupled model's last async_exec call is resolved, its
        main thread goes back to the channel at once, not after the
        bound of its wait (made longer than the test here)."""
        import asyncio

        from stubvisor import bls
        from stubvisor import host as hostmod

        sup, host = add_sub_host(self)
        saved = hostmod._BUSY_PERIOD
        hostmod._BUSY_PERIOD = 10 * WAIT
        self.addCleanup(setattr, hostmod, "_BUSY_PERIOD", saved)
        loop = asyncio.new_event_loop()
        self.addCleanup(loop.close)
        call = bls._Call(host, 1)
        call.waker = (loop, loop.create_future())
        call.queue.append([1, ipc.FLAG_FINAL, None, [], ""])
        taken = self._main_awaiting_loop(sup, host)
        host._async_ready[loop] = [call]
        host._resolve_ready(loop)  # the call's final answer: none open
        self.assertTrue(call.waker[1].done())
        command = [ipc.KIND_EXECUTE, 9, []]
        sup.send(command)
        try:
            got = taken.get(timeout=2)
        except queue.Empty:
            self.fail("the main thread did not read again once the calls ended")
        self.assertEqual(got[:2], command[:2])

if __name__ == "__main__":
    unittest.main()
