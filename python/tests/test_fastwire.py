"""stubvisor.fastwire makes the bytes the stub's msgpack codec makes of the
same message, at every boundary of msgpack's integer, string, array and
bin forms."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from stubvisor import fastwire, ipc  # noqa: E402
from stubvisor.ipc import msgpack  # noqa: E402  (python3-msgpack, or the stub's own codec)

INTS = [0, 1, 127, 128, 255, 256, 65535, 65536, (1 << 32) - 1, 1 << 32, (1 << 64) - 1]
NAMES = ["", "OUTPUT0", "x" * 31, "x" * 32, "x" * 255, "x" * 256, "é" * 20, "数据" * 10]
SHAPES = [(), (16,), (1, 16), (2, 3, 4), tuple(range(1, 17)), (65536, 1)]
SIZES = [1, 64, 255, 256, 1024]


def pack(obj):
    return msgpack.packb(obj, use_bin_type=True)


class FastwireTest(unittest.TestCase):
    def test_uint_and_array_header(self):
        for n in INTS:
            with self.subTest(n=n):
                self.assertEqual(fastwire.uint(n), pack(n))
                self.assertEqual(fastwire.pack_uint(n), pack(n))
        for n in [0, 1, 15, 16, 65535, 65536]:
            with self.subTest(array=n):
                self.assertEqual(fastwire.array_header(n) + pack(0) * n, pack([0] * n))
                self.assertEqual(fastwire.final_nil_array(n) + pack(0) * n, pack([1, None, [0] * n])[1:])

    def test_inline_output_descriptor(self):
        for name in NAMES:
            for shape in SHAPES[1:]:
                for size in SIZES:
                    with self.subTest(name=name[:8], shape=shape, size=size):
                        fastwire.heads.clear()  # a shape and a type give one size
                        data = bytes(range(256)) * 4
                        data = data[:size]
                        want = pack([name, 11, list(shape), ipc.LOC_INLINE, 0, size, data])
                        self.assertEqual(fastwire.inline_head(name, 11, shape, size) + data, want)
                        # The kept head is the same bytes.
                        self.assertEqual(fastwire.inline_head(name, 11, shape, size) + data, want)

    def test_outputs_that_do_not_travel_inline(self):
        for what, (dtype, shape, size) in {"BYTES": (13, (2,), 16), "no elements": (11, (0,), 0),
                                           "no dimensions": (11, (), 4), "over INLINE_MAX": (11, (257,), 1028)}.items():
            with self.subTest(what=what):
                self.assertEqual(fastwire.inline_head("OUT", dtype, shape, size), b"")
                self.assertEqual(fastwire.heads[("OUT", dtype, shape)], b"")

    def test_execute_done(self):
        out0, out1 = b"\x01" * 64, b"\x02" * 8
        for batch_id in INTS:
            for handle in INTS:
                with self.subTest(batch_id=batch_id, handle=handle):
                    response = [fastwire.final_response_open(handle, 2),
                                fastwire.inline_head("OUTPUT0", 11, (16,), 64), out0,
                                fastwire.inline_head("OUTPUT1", 8, (2, 1), 8), out1,
                                fastwire.NO_PARAMETERS]
                    frame = b"".join([fastwire.DONE_OPEN, fastwire.uint(batch_id), fastwire.nil_array(2)]
                                     + response + response)
                    wire = [handle, ipc.FLAG_FINAL, None,
                            [["OUTPUT0", 11, [16], ipc.LOC_INLINE, 0, 64, out0],
                             ["OUTPUT1", 8, [2, 1], ipc.LOC_INLINE, 0, 8, out1]], ""]
                    want = [ipc.KIND_EXECUTE_DONE, batch_id, None, [wire, wire]]
                    self.assertEqual(frame, pack(want))
                    self.assertEqual(msgpack.unpackb(frame, raw=False, strict_map_key=False), want)

    def test_many_shapes_are_forgotten_not_kept(self):
        for i in range(fastwire._HEADS_MAX + 10):
            fastwire.inline_head("OUTPUT0", 11, (i + 1,), 4)
        self.assertLessEqual(len(fastwire.heads), fastwire._HEADS_MAX)

    def test_long_arrays(self):
        for n in [15, 16, 17, 65536]:
            with self.subTest(n=n):
                self.assertEqual(fastwire.nil_array(n) + pack(0) * n, pack(None) + pack([0] * n))
                self.assertEqual(fastwire.final_response_open(7, n) + pack(0) * n + fastwire.NO_PARAMETERS,
                                 pack([7, ipc.FLAG_FINAL, None, [0] * n, ""]))


if __name__ == "__main__":
    unittest.main()
