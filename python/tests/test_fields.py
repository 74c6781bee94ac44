"""The position constants of stubvisor.fields are the positions of the
names in its tables (the tables themselves are checked against the Go
message table by python/fields_test.go)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from stubvisor import fields, ipc  # noqa: E402

# Constant prefix -> (the names it indexes, the position of the first one).
SHAPES = {
    "R_": (fields.REQUEST_FIELDS, 0), "T_": (fields.TENSOR_FIELDS, 0), "RS_": (fields.RESPONSE_FIELDS, 0),
    "E_": (fields.ERROR_FIELDS, 0), "O_": (fields.OUTPUT_TARGET_FIELDS, 0),
    "EXECUTE_": (fields.MESSAGES[ipc.KIND_EXECUTE][1], 1), "RELEASE_": (fields.MESSAGES[ipc.KIND_RELEASE][1], 1),
    "INFER_RESULT_": (fields.MESSAGES[ipc.KIND_INFER_RESULT][1], 1),
    "MAP_": (fields.MESSAGES[ipc.KIND_MAP_REGION][1], 1), "UNMAP_": (fields.MESSAGES[ipc.KIND_UNMAP_REGION][1], 1),
    "CONTROL_RESULT_": (fields.MESSAGES[ipc.KIND_CONTROL_RESULT][1], 1),
    "INITIALIZE_": (fields.MESSAGES[ipc.KIND_INITIALIZE][1], 1),
    "AUTO_COMPLETE_": (fields.MESSAGES[ipc.KIND_AUTO_COMPLETE][1], 1),
}


class PositionsTest(unittest.TestCase):
    def test_every_constant_is_its_names_position(self):
        checked = 0
        for const, value in vars(fields).items():
            if not const.isupper() or not isinstance(value, int) or const in ("M_KIND", "M_ID"):
                continue
            with self.subTest(const=const):
                if const == "T_DATA":
                    self.assertEqual(value, fields.T_REGION_ID)
                    continue
                prefix = max((p for p in SHAPES if const.startswith(p)), key=len)
                names, first = SHAPES[prefix]
                name = const[len(prefix):].lower()
                self.assertIn(name, names)
                self.assertEqual(value, first + names.index(name))
                checked += 1
        self.assertGreater(checked, 30)

    def test_message_head(self):
        self.assertEqual((fields.M_KIND, fields.M_ID), (0, 1))
        self.assertEqual(len(fields.MESSAGES), sum(1 for k in vars(ipc) if k.startswith("KIND_")))

    def test_orders_the_execute_path_unpacks(self):
        # stubvisor/execute.py unpacks a request's first eight elements and
        # a tensor's seven by position.
        self.assertEqual(fields.REQUEST_FIELDS[:8], ("handle", "id", "correlation_id", "flags", "inputs",
                                                     "requested_outputs", "parameters_json", "timeout_micros"))
        self.assertEqual(fields.TENSOR_FIELDS, ("name", "data_type", "shape", "loc", "offset", "size", "region_id"))


if __name__ == "__main__":
    unittest.main()
