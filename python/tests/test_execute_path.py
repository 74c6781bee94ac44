"""The stub's execute path in one process (the supervisor's side of a real
region and a Host reading it, no stub process): the requests it builds set
every slot pb_utils._fill_request sets, and the usual ExecuteDone, encoded
by hand (stubvisor.fastwire), says what the general path says."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import triton_python_backend_utils as pb  # noqa: E402
from stubvisor import execute as execmod  # noqa: E402
from stubvisor import ipc  # noqa: E402

from .stubharness import WAIT, add_sub_host  # noqa: E402


class ExecutePathTest(unittest.TestCase):
    def setUp(self):
        self.sup, self.host = add_sub_host(self)
        self.seen = []
        execute = self.host.model.execute
        self.host.model.execute = lambda requests: self.seen.append(requests) or execute(requests)

    def run_batch(self, requests):
        self.sup.send([ipc.KIND_EXECUTE, 9, requests])
        self.host._on_execute(self.host._next_command())
        return self.sup.recv(WAIT)

    def batch(self, n, requested=()):
        a = (np.arange(16, dtype=np.float32) + 0.5).tobytes()
        b = np.full(16, 2, dtype=np.float32).tobytes()
        return [[1000 + i, "id%d" % i, i, 0,
                 [["INPUT0", 11, [16], ipc.LOC_INLINE, 0, 64, a], ["INPUT1", 11, [16], ipc.LOC_INLINE, 0, 64, b]],
                 list(requested), "", 0] for i in range(n)]

    def test_requests_have_every_slot(self):
        self.run_batch(self.batch(2, ["OUTPUT1"]))
        (requests,) = self.seen
        want = pb._fill_request(pb._new_request(pb.InferenceRequest), self.host, 1000, "id0", 0, 0, [], ["OUTPUT1"],
                                "", 0, "add_sub", self.host.model_version, pb._DEFAULT_PREFERRED_MEMORY,
                                pb._DEFAULT_TRACE)
        for slot in pb.InferenceRequest.__slots__:
            if slot in ("__weakref__", "_inputs", "_final"):
                continue
            with self.subTest(slot=slot):
                self.assertEqual(getattr(requests[0], slot), getattr(want, slot))
        self.assertTrue(requests[0]._final)  # answered
        self.assertEqual([t.name() for t in requests[1].inputs()], ["INPUT0", "INPUT1"])
        self.assertEqual(requests[1].correlation_id(), 1)

    def test_usual_done_says_what_the_general_path_says(self):
        cases = {"one": self.batch(1), "three": self.batch(3), "requested": self.batch(2, ["OUTPUT0"])}
        for name, requests in cases.items():
            with self.subTest(case=name):
                # The compiled fast path's frame (when it is loaded), then
                # fastwire's, then the general path's must say the same.
                answers = []
                if execmod._fast_done is not None:
                    answers.append(self.run_batch(requests))
                usual = self.host._usual_done
                frames = []
                self.host._usual_done = lambda *args: frames.append(usual(*args)) or frames[-1]
                saved = execmod._fast_done
                execmod._fast_done = None
                try:
                    answers.append(self.run_batch(requests))
                    self.assertIsInstance(frames[0], bytes)  # the hand-encoded path answered
                    self.host._usual_done = lambda *args: None
                    general = self.run_batch(requests)
                finally:
                    self.host._usual_done = usual
                    execmod._fast_done = saved
                for fast in answers:
                    self.assertEqual(fast, general)
                self.assertEqual(general[0], ipc.KIND_EXECUTE_DONE)
                self.assertEqual(len(general[3]), len(requests))
                out = general[3][0][3]
                self.assertEqual([o[0] for o in out], ["OUTPUT0"] if name == "requested" else ["OUTPUT0", "OUTPUT1"])
                got = np.frombuffer(out[0][6], dtype=np.float32)
                np.testing.assert_array_equal(got, np.arange(16, dtype=np.float32) + 2.5)

if __name__ == "__main__":
    unittest.main()
