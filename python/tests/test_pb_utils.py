"""triton_python_backend_utils on its own: the parts that need no stub."""

import gc
import json
import sys
import unittest

import numpy as np

import triton_python_backend_utils as pb


class TypesTest(unittest.TestCase):
    def test_codes_round_trip(self):
        cases = {
            np.bool_: 1, np.uint8: 2, np.uint16: 3, np.uint32: 4, np.uint64: 5, np.int8: 6, np.int16: 7,
            np.int32: 8, np.int64: 9, np.float16: 10, np.float32: 11, np.float64: 12, np.object_: 13,
        }
        for np_type, code in cases.items():
            with self.subTest(np_type=np_type):
                self.assertEqual(pb.numpy_to_triton_type(np_type), code)
                self.assertEqual(pb.triton_to_numpy_type(code), np_type)
        self.assertEqual(pb.numpy_to_triton_type(np.bytes_), 13)
        self.assertIsNone(pb.triton_to_numpy_type(14))
        self.assertIsNone(pb.numpy_to_triton_type(np.complex64))

    def test_string_to_numpy(self):
        self.assertIs(pb.triton_string_to_numpy("TYPE_FP32"), np.float32)
        self.assertIs(pb.triton_string_to_numpy("TYPE_STRING"), np.object_)
        self.assertIs(pb.triton_string_to_numpy("TYPE_BOOL"), bool)
        with self.assertRaises(KeyError):
            pb.triton_string_to_numpy("TYPE_BF16")

    def test_constants(self):
        self.assertEqual((pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START, pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END), (1, 2))
        self.assertEqual(pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL, 1)
        self.assertEqual((pb.TRITONSERVER_REQUEST_RELEASE_ALL, pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE), (1, 2))
        self.assertNotEqual(pb.TRITONSERVER_MEMORY_CPU, pb.TRITONSERVER_MEMORY_GPU)


class BytesTest(unittest.TestCase):
    def test_round_trip(self):
        cases = {
            "bytes": np.array([b"a", b"", b"\x00\xff"], dtype=np.object_),
            "str": np.array(["h\u00e9", "x"], dtype=np.object_),
            "2d": np.array([[b"a", b"bc"], [b"d", b"e"]], dtype=np.object_),
            "bytes_": np.array([b"ab", b"c"], dtype=np.bytes_),
            "numbers": np.array([1, 2.5], dtype=np.object_),
            "long elements": np.array([b"x" * 1023, b"y" * 1024, b"z" * 70000], dtype=np.object_),
            "bytes_ elements": np.array([np.bytes_(b"ab"), b"c"], dtype=np.object_),
            "bytearray": np.array([bytearray(b"ab"), b"c"], dtype=np.object_),
        }
        for name, array in cases.items():
            with self.subTest(name):
                data = pb.serialize_byte_tensor(array)
                out = pb.deserialize_bytes_tensor(data)
                want = [x if isinstance(x, bytes) else str(x).encode() for x in array.reshape(-1).tolist()]
                self.assertEqual(out.tolist(), want)
                self.assertEqual(out.dtype, np.object_)

    def test_wire_form(self):
        data = pb.serialize_byte_tensor(np.array([b"ab", b""], dtype=np.object_))
        self.assertEqual(data, b"\x02\x00\x00\x00ab\x00\x00\x00\x00")

    def test_edge_returns(self):
        self.assertEqual(pb.serialize_byte_tensor(np.array([], dtype=np.object_)), ())
        self.assertIsNone(pb.serialize_byte_tensor(np.array([1.0], dtype=np.float32)))
        self.assertEqual(pb.deserialize_bytes_tensor(b"").tolist(), [])
        self.assertEqual(pb.deserialize_bytes_tensor(np.frombuffer(b"\x01\x00\x00\x00z", np.uint8)).tolist(), [b"z"])

    def test_truncated(self):
        for data in (b"\x05\x00\x00\x00ab", b"\x01\x00"):
            with self.subTest(data=data), self.assertRaisesRegex(ValueError, "truncated BYTES tensor"):
                pb.deserialize_bytes_tensor(data)


class TensorTest(unittest.TestCase):
    def test_basic(self):
        t = pb.Tensor("X", np.arange(6, dtype=np.float16).reshape(2, 3))
        self.assertEqual((t.name(), t.triton_dtype(), t.shape(), t.is_cpu()), ("X", 10, [2, 3], True))
        np.testing.assert_array_equal(t.as_numpy(), np.arange(6, dtype=np.float16).reshape(2, 3))

    def test_errors(self):
        with self.assertRaisesRegex(pb.TritonModelException, "^Tensor name cannot be an empty string.$"):
            pb.Tensor("", np.zeros(1))
        with self.assertRaisesRegex(pb.TritonModelException, "^NumPy dtype is not supported.$"):
            pb.Tensor("X", np.array(["unicode"]))
        with self.assertRaises(TypeError):
            pb.Tensor(None, np.zeros(1))

    def test_contiguity_and_lists(self):
        a = np.arange(12, dtype=np.int32).reshape(3, 4).T
        t = pb.Tensor("X", a)
        self.assertTrue(t.as_numpy().flags.c_contiguous)
        np.testing.assert_array_equal(t.as_numpy(), a)
        self.assertEqual(pb.Tensor("L", [1, 2, 3]).triton_dtype(), 9)

    def test_big_endian_is_converted(self):
        t = pb.Tensor("X", np.array([1, 2], dtype=">i4"))
        self.assertEqual(t.triton_dtype(), 8)
        self.assertEqual(t.as_numpy().tolist(), [1, 2])

    def test_payload(self):
        cases = {
            "fp32": (np.array([1.5, 2.5], np.float32), np.array([1.5, 2.5], np.float32).tobytes()),
            "bool": (np.array([True, False]), b"\x01\x00"),
            "scalar": (np.array(7, np.int64), np.array(7, np.int64).tobytes()),
            "bytes": (np.array([b"ab"], np.object_), b"\x02\x00\x00\x00ab"),
            "empty": (np.zeros((0, 3), np.float32), b""),
        }
        for name, (array, want) in cases.items():
            with self.subTest(name):
                data, size, shape = pb.Tensor("X", array)._payload()
                self.assertEqual(bytes(data), want)
                self.assertEqual(size, len(want))
                self.assertEqual(shape, list(array.shape))

    def test_inline_input(self):
        # An input whose bytes came in the message: as_numpy has the wire's
        # dtype and shape and is writable, as a view of the pool is, without
        # touching the message's bytes.
        from stubvisor import ipc

        self.assertEqual(pb._LOC_INLINE, ipc.LOC_INLINE)
        data = np.arange(6, dtype=np.float32).tobytes()
        t = pb._tensor("IN", 11, None, [2, 3], (pb._LOC_INLINE, data, len(data)))
        self.assertTrue(t.is_cpu())
        self.assertEqual(t.shape(), [2, 3])
        a = t.as_numpy()
        self.assertEqual((a.dtype, a.shape), (np.float32, (2, 3)))
        self.assertTrue(a.flags.writeable)
        a += 1
        self.assertIs(t.as_numpy(), a)
        self.assertEqual(data, np.arange(6, dtype=np.float32).tobytes())
        short = pb._tensor("IN", 11, None, [4], (pb._LOC_INLINE, data[:8], 8))
        with self.assertRaises(TypeError):
            short.as_numpy()
        # Returned untouched, its bytes go out as they came.
        untouched = pb._tensor("IN", 11, None, [2, 3], (pb._LOC_INLINE, data, len(data)))
        payload, size, shape = untouched._payload()
        self.assertEqual((bytes(payload), size, shape), (data, len(data), [2, 3]))
        wire = bytes(pb.serialize_byte_tensor(np.array([b"ab", b"", b"c"], np.object_)))
        strings = pb._tensor("S", 13, None, [3], (pb._LOC_INLINE, wire, len(wire)))
        self.assertEqual(strings.as_numpy().tolist(), [b"ab", b"", b"c"])

    def test_dlpack_round_trip(self):
        cases = {
            "fp32": np.arange(6, dtype=np.float32).reshape(2, 3),
            "bool": np.array([True, False, True]),
            "fp16": np.array([0.5], np.float16),
            "uint64": np.array([2**64 - 1], np.uint64),
            "empty": np.zeros((0,), np.int32),
        }
        for name, array in cases.items():
            with self.subTest(name):
                src = pb.Tensor("A", array)
                back = pb.Tensor.from_dlpack("B", src.to_dlpack())
                self.assertEqual(back.triton_dtype(), src.triton_dtype())
                np.testing.assert_array_equal(back.as_numpy(), array)
                if array.size:
                    # Zero-copy: the same memory.
                    self.assertEqual(back.as_numpy().__array_interface__["data"][0],
                                     src.as_numpy().__array_interface__["data"][0])

    def test_dlpack_protocol_objects(self):
        t = pb.Tensor("A", np.arange(4, dtype=np.int16))
        self.assertEqual(t.__dlpack_device__(), (1, 0))
        np.testing.assert_array_equal(np.from_dlpack(t), np.arange(4, dtype=np.int16))
        from_np = pb.Tensor.from_dlpack("B", np.arange(3, dtype=np.float64))
        self.assertEqual(from_np.triton_dtype(), 12)
        via_protocol = pb.Tensor.from_dlpack("C", t)
        np.testing.assert_array_equal(via_protocol.as_numpy(), np.arange(4, dtype=np.int16))

    def test_dlpack_errors(self):
        with self.assertRaisesRegex(pb.TritonModelException, "DLPack does not have support for string tensors."):
            pb.Tensor("S", np.array([b"x"], np.object_)).to_dlpack()
        with self.assertRaisesRegex(pb.TritonModelException, "not contiguous"):
            pb.Tensor.from_dlpack("X", np.arange(6).reshape(2, 3).T)
        with self.assertRaisesRegex(pb.TritonModelException, "Tensor must be a DLPack capsule"):
            pb.Tensor.from_dlpack("X", object())
        capsule = pb.Tensor("A", np.zeros(2)).to_dlpack()
        pb.Tensor.from_dlpack("B", capsule)
        with self.assertRaisesRegex(pb.TritonModelException, "already been consumed"):
            pb.Tensor.from_dlpack("C", capsule)

    def test_bf16_only_through_dlpack(self):
        raw = np.array([0x3F80, 0x4000], np.uint16)  # 1.0, 2.0
        t = pb._tensor_from_array("BF", 14, raw)
        with self.assertRaisesRegex(pb.TritonModelException, "Tensor dtype is BF16 and cannot be converted to NumPy"):
            t.as_numpy()
        back = pb.Tensor.from_dlpack("BF2", t.to_dlpack())
        self.assertEqual(back.triton_dtype(), 14)
        self.assertEqual(bytes(back._payload()[0]), raw.tobytes())

    def test_dlpack_exports_are_released(self):
        before = len(pb._dl_exports)
        capsule = pb.Tensor("A", np.zeros(4)).to_dlpack()
        self.assertEqual(len(pb._dl_exports), before + 1)
        del capsule  # never consumed: the capsule destructor runs the deleter
        gc.collect()
        self.assertEqual(len(pb._dl_exports), before)
        t = pb.Tensor.from_dlpack("B", pb.Tensor("A", np.zeros(4)).to_dlpack())
        self.assertEqual(len(pb._dl_exports), before + 1)
        del t  # consumed: dropping the importer runs the deleter
        gc.collect()
        self.assertEqual(len(pb._dl_exports), before)


class ResponseTest(unittest.TestCase):
    def test_defaults(self):
        r = pb.InferenceResponse()
        self.assertEqual((r.output_tensors(), r.has_error(), r.error(), r.parameters()), ([], False, None, "{}"))

    def test_error(self):
        r = pb.InferenceResponse(error=pb.TritonError("boom", pb.TritonError.NOT_FOUND))
        self.assertTrue(r.has_error())
        self.assertEqual((r.error().message(), r.error().code()), ("boom", 2))

    def test_parameters(self):
        r = pb.InferenceResponse([], parameters={"a": 1, "b": "x", "c": False})
        self.assertEqual(json.loads(r.parameters()), {"a": 1, "b": "x", "c": False})
        cases = {
            "float value": ({"f": 1.5}, "Expect parameters values to have type bool/int/str, found type <class 'float'>"),
            "int key": ({1: 1}, "Expect parameters keys to have type str, found type <class 'int'>"),
        }
        for name, (params, text) in cases.items():
            with self.subTest(name), self.assertRaisesRegex(pb.TritonModelException, "^" + text.replace("(", r"\(")):
                pb.InferenceResponse([], parameters=params)

    def test_output_lookup(self):
        r = pb.InferenceResponse([pb.Tensor("A", np.zeros(1)), pb.Tensor("B", np.ones(1))])
        self.assertEqual(pb.get_output_tensor_by_name(r, "B").name(), "B")
        self.assertIsNone(pb.get_output_tensor_by_name(r, "C"))

    def test_bad_arguments(self):
        with self.assertRaises(TypeError):
            pb.InferenceResponse([np.zeros(1)])
        with self.assertRaises(TypeError):
            pb.InferenceResponse([], error="text")


class TritonErrorTest(unittest.TestCase):
    def test_codes(self):
        names = ["UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE", "UNSUPPORTED", "ALREADY_EXISTS",
                 "CANCELLED"]
        self.assertEqual([getattr(pb.TritonError, n) for n in names], list(range(8)))
        self.assertEqual(pb.TritonError("m").code(), pb.TritonError.INTERNAL)
        with self.assertRaises(TypeError):
            pb.TritonError(None)
        with self.assertRaises(TypeError):
            pb.TritonError("m", 99)

    def test_model_exception(self):
        e = pb.TritonModelException("bad")
        self.assertEqual((str(e), e.message()), ("bad", "bad"))
        self.assertIsInstance(e, Exception)


class RequestTest(unittest.TestCase):
    def test_bls_request(self):
        x = pb.Tensor("X", np.zeros(2))
        r = pb.InferenceRequest(model_name="m", inputs=[x], requested_output_names=["Y", "Y"], correlation_id="s",
                                parameters={"k": 1}, timeout=5, flags=pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START)
        self.assertEqual((r.model_name(), r.requested_output_names(), r.correlation_id(), r.timeout(), r.flags()),
                         ("m", ["Y"], "s", 5, 1))
        self.assertEqual(json.loads(r.parameters()), {"k": 1})
        self.assertIs(pb.get_input_tensor_by_name(r, "X"), x)
        self.assertIsNone(pb.get_input_tensor_by_name(r, "Z"))
        self.assertIsNone(r.trace().get_context())
        r.set_flags(2)
        self.assertEqual(r.flags(), 2)

    def test_input_lookup_paths(self):
        # A request reads its slots; anything else with inputs() (a model's
        # own test double, say) is asked through its methods.
        x, y = pb.Tensor("X", np.zeros(1)), pb.Tensor("Y", np.ones(1))

        class Double:
            def inputs(self):
                return [x, y]

        cases = {
            "request": pb.InferenceRequest(model_name="m", inputs=[x, y], requested_output_names=[]),
            "incoming request": pb._incoming_request(type("RT", (), {"model_name": "m", "model_version": 1})(),
                                                     1, "", 0, 0, [x, y], [], "", 0),
            "other object": Double(),
        }
        for name, request in cases.items():
            with self.subTest(name):
                self.assertIs(pb.get_input_tensor_by_name(request, "Y"), y)
                self.assertIsNone(pb.get_input_tensor_by_name(request, "Z"))

    def test_bytes_arguments(self):
        # python_backend's BLS example passes a name read from a BYTES tensor.
        name = np.array([b"add_sub"], dtype=np.object_)[0]
        r = pb.InferenceRequest(model_name=name, inputs=[], requested_output_names=[b"OUT", "OUT"], request_id=b"r1")
        self.assertEqual((r.model_name(), r.requested_output_names(), r.request_id()), ("add_sub", ["OUT"], "r1"))
        self.assertEqual(r._model_version, -1)  # the latest version, resolved by the server

    def test_argument_validation(self):
        cases = {
            "int model_name": (dict(model_name=3, inputs=[], requested_output_names=[]), TypeError, "model_name"),
            "missing model_name": (dict(inputs=[], requested_output_names=[]), TypeError, "model_name"),
            "None inputs": (dict(model_name="m", inputs=None, requested_output_names=[]), TypeError, "inputs"),
            "None trace": (dict(model_name="m", inputs=[], requested_output_names=[], trace=None), TypeError,
                           "argument 'trace' must not be None"),
            "None timeout": (dict(model_name="m", inputs=[], requested_output_names=[], timeout=None), TypeError,
                             "argument 'timeout' must not be None"),
            # The first argument in Triton's order is named.
            "None request id, missing model_name": (dict(request_id=None, inputs=[], requested_output_names=[]),
                                                    TypeError, "argument 'request_id' must not be None"),
            "missing outputs, None flags": (dict(model_name="m", inputs=[], flags=None), TypeError,
                                            "missing required argument 'requested_output_names'"),
            "None in inputs": (dict(model_name="m", inputs=[None], requested_output_names=[]),
                               pb.TritonModelException, "pb_utils.Tensor"),
            "float correlation id": (dict(model_name="m", inputs=[], requested_output_names=[], correlation_id=1.5),
                                     pb.TritonModelException, "Correlation ID must be integer or string"),
            "float parameter": (dict(model_name="m", inputs=[], requested_output_names=[], parameters={"a": 0.5}),
                                pb.TritonModelException, "bool/int/str"),
        }
        for name, (kwargs, exc, text) in cases.items():
            with self.subTest(name), self.assertRaisesRegex(exc, text):
                pb.InferenceRequest(**kwargs)

    def test_outside_stub(self):
        r = pb.InferenceRequest(model_name="m", inputs=[], requested_output_names=[])
        with self.assertRaisesRegex(pb.TritonModelException, "BLS is only supported during the 'execute' function."):
            r.exec()
        self.assertFalse(r.is_cancelled())
        with self.assertRaises(pb.TritonModelException):
            r.get_response_sender()
        with self.assertRaisesRegex(pb.TritonModelException, "only available inside a model"):
            pb.get_model_dir()

    def test_model_control_outside_stub(self):
        for fn, args in ((pb.load_model, ("m",)), (pb.unload_model, ("m",)), (pb.is_model_ready, ("m",))):
            with self.subTest(fn.__name__), self.assertRaisesRegex(pb.TritonModelException, "only available inside"):
                fn(*args)
        with self.assertRaises(TypeError):
            pb.load_model(None)
        with self.assertRaises(TypeError):
            pb.is_model_ready("m", 3)


class _Recorder:
    """The runtime seen by a sender: records what would go to the server."""

    decoupled = False

    def __init__(self, decoupled):
        self.decoupled = decoupled
        self.sent = []
        self.model_name, self.model_version = "m", 1

    def send_response(self, request, response, flags):
        self.sent.append((response, flags))


class SenderTest(unittest.TestCase):
    def sender(self, decoupled):
        rt = _Recorder(decoupled)
        req = pb._incoming_request(rt, 1, "", 0, 0, [], [], "", 0)
        return rt, req.get_response_sender()

    def test_rules(self):
        ok = pb.InferenceResponse()
        final = pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        cases = {
            "bad flag": (False, [(ok, 4)], "Unable to send response. Unsupported flag provided."),
            "no response": (True, [(None, 0)], "Inference Response object must be provided when the response "
                                               "flags is set to zero."),
            "two from non-decoupled": (False, [(ok, 0), (ok, 0)], "Non-decoupled model cannot send more than one "
                                                                  "response."),
            "final first": (False, [(None, final)], "Non-decoupled model cannot send complete final before sending "
                                                    "a response."),
            "after final": (True, [(ok, final), (ok, 0)], "Unable to send response. Response sender has been closed."),
        }
        for name, (decoupled, sends, text) in cases.items():
            with self.subTest(name):
                rt, sender = self.sender(decoupled)
                with self.assertRaisesRegex(pb.TritonModelException, text.replace(".", r"\.")):
                    for response, flags in sends:
                        sender.send(response, flags)
                self.assertEqual(len(rt.sent), len(sends) - 1)

    def test_decoupled_stream(self):
        rt, sender = self.sender(True)
        for _ in range(3):
            sender.send(pb.InferenceResponse())
        sender.send(flags=pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        self.assertEqual([f for _, f in rt.sent], [0, 0, 0, 1])
        self.assertIs(sender, sender._request.get_response_sender())


class ModelConfigTest(unittest.TestCase):
    def config(self, **extra):
        base = {"name": "m", "max_batch_size": 4, "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [2]}],
                "output": []}
        base.update(extra)
        return pb.ModelConfig(json.dumps(base))

    def test_errors_are_tritons(self):
        cases = {
            "smaller batch": (lambda c: c.set_max_batch_size(2),
                              "configuration specified max_batch_size 4, but in auto-complete-config function for "
                              "model 'm' specified max_batch_size 2"),
            "extra property": (lambda c: c.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [1], "z": 1}),
                               "input 'X' in auto-complete-config function for model 'm' contains property other than "
                               "'name', 'data_type', 'dims' and 'optional'."),
            "output extra property": (lambda c: c.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [1],
                                                              "optional": True}),
                                      "output 'Y' in auto-complete-config function for model 'm' contains property "
                                      "other than 'name', 'data_type' and 'dims'."),
            "missing name": (lambda c: c.add_input({"data_type": "TYPE_FP32", "dims": [1]}),
                             "input in auto-complete-config function for model 'm' is missing 'name' property."),
            "missing dims": (lambda c: c.add_output({"name": "Y", "data_type": "TYPE_FP32"}),
                             "output 'Y' in auto-complete-config function for model 'm' is missing 'dims' property."),
            "type clash": (lambda c: c.add_input({"name": "IN", "data_type": "TYPE_INT32", "dims": [2]}),
                           "unable to load model 'm', configuration expects datatype TYPE_FP32 for input 'IN', model "
                           "provides TYPE_INT32"),
            "dims clash": (lambda c: c.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [3]}),
                           "model 'm', tensor 'IN': the model expects dims [3] but the model configuration specifies "
                           "dims [2]"),
            "policy property": (lambda c: c.set_model_transaction_policy({"other": 1}),
                                "model transaction property in auto-complete-config function for model 'm' contains "
                                "property other than 'decoupled'."),
        }
        for name, (op, text) in cases.items():
            with self.subTest(name):
                with self.assertRaises(ValueError) as ctx:
                    op(self.config())
                self.assertEqual(str(ctx.exception), text)

    def test_scheduler_clash(self):
        with self.assertRaises(ValueError) as ctx:
            self.config(sequence_batching={}).set_dynamic_batching()
        self.assertEqual(str(ctx.exception), "Configuration specified scheduling_choice as 'sequence_batching', but "
                                             "auto-complete-config function for model 'm' tries to set "
                                             "scheduling_choice as 'dynamic_batching'")

    def test_decoupled_change(self):
        c = self.config(model_transaction_policy={"decoupled": False})
        with self.assertRaises(ValueError) as ctx:
            c.set_model_transaction_policy({"decoupled": True})
        self.assertEqual(str(ctx.exception), "trying to change decoupled property in auto-complete-config for model "
                                             "'m', which is already set to 'False'.")

    def test_fills(self):
        c = self.config()
        c.set_max_batch_size(8)
        c.set_dynamic_batching()
        c.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [2], "optional": True})
        c.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [2]})
        c.set_model_transaction_policy({"decoupled": True})
        d = c.as_dict()
        self.assertEqual(d["max_batch_size"], 8)
        self.assertEqual(d["dynamic_batching"], {})
        self.assertEqual(d["input"], [{"name": "IN", "data_type": "TYPE_FP32", "dims": [2], "optional": True}])
        self.assertEqual(d["output"], [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [2]}])
        self.assertTrue(pb.using_decoupled_model_transaction_policy(d))
        self.assertEqual(pb.get_input_config_by_name(d, "IN")["dims"], [2])
        self.assertIsNone(pb.get_output_config_by_name(d, "NOPE"))

    def test_config_without_tensor_lists(self):
        c = pb.ModelConfig(json.dumps({"name": "m"}))
        c.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [1]})
        self.assertEqual(len(c.as_dict()["input"]), 1)


class LoggerTest(unittest.TestCase):
    def test_levels(self):
        self.assertEqual([pb.Logger.INFO, pb.Logger.WARNING, pb.Logger.ERROR, pb.Logger.VERBOSE], [0, 1, 2, 3])

    def test_runtime_receives_caller_location(self):
        got = []

        class RT:
            def log(self, level, message, filename, line):
                got.append((level, message, filename, line))

        saved = pb._runtime
        pb._runtime = RT()
        try:
            line = sys._getframe().f_lineno + 1
            pb.Logger.log_error("e")
            pb.Logger.log("v", pb.Logger.VERBOSE)
        finally:
            pb._runtime = saved
        self.assertEqual(got, [("ERROR", "e", "test_pb_utils.py", line), ("VERBOSE", "v", "test_pb_utils.py", line + 1)])


class MetricsTest(unittest.TestCase):
    def test_counter_gauge(self):
        # The families must outlive their metrics, as in Triton.
        counter_family = pb.MetricFamily("t_counter", "d", pb.MetricFamily.COUNTER)
        counter = counter_family.Metric(labels={"a": "1"})
        counter.increment(2)
        self.assertEqual(counter.value(), 2.0)
        with self.assertRaises(pb.TritonModelException):
            counter.increment(-1)
        with self.assertRaises(pb.TritonModelException):
            counter.set(1)
        with self.assertRaises(pb.TritonModelException):
            counter.observe(1)
        gauge_family = pb.MetricFamily("t_gauge", "d", pb.GAUGE)
        gauge = gauge_family.Metric()
        gauge.increment(2)
        gauge.increment(-3)
        self.assertEqual(gauge.value(), -1.0)
        gauge.set(9.5)
        self.assertEqual(gauge.value(), 9.5)

    def test_shared_series_and_kind_clash(self):
        f1 = pb.MetricFamily("t_dup", "first", pb.COUNTER)
        f2 = pb.MetricFamily("t_dup", "second", pb.COUNTER)
        m1, m2 = f1.Metric(labels={"k": "v"}), f2.Metric(labels={"k": "v"})
        m1.increment(7.5)
        self.assertEqual(m2.value(), 7.5)
        with self.assertRaises(pb.TritonModelException):
            pb.MetricFamily("t_dup", "d", pb.GAUGE)

    def test_histogram(self):
        family = pb.MetricFamily("t_hist", "d", pb.MetricFamily.HISTOGRAM)
        for buckets in (None, [2.5, 0.1], [1, 1, 2]):
            with self.subTest(buckets=buckets), self.assertRaises(pb.TritonModelException):
                family.Metric(labels={}, buckets=buckets)
        family.Metric(labels={"empty": "1"}, buckets=[])
        h = family.Metric(labels={}, buckets=[0.1, 1.0, 2.5])
        for v in (0.05, 1.5, 6.0):
            h.observe(v)
        self.assertEqual(h._cell.counts, [1, 1, 2, 3])
        self.assertEqual((h._cell.count, h._cell.sum), (3, 7.55))
        for op in (h.value, lambda: h.increment(1), lambda: h.set(1)):
            with self.assertRaises(pb.TritonModelException):
                op()

    def test_family_deleted_first(self):
        family = pb.MetricFamily("t_life", "d", pb.MetricFamily.GAUGE)
        metric = family.Metric(labels={"x": "y"})
        del family
        gc.collect()
        for op in (lambda: metric.set(10), lambda: metric.increment(1), metric.value):
            with self.assertRaisesRegex(pb.TritonModelException, "Invalid metric operation as the corresponding "
                                                                 "'MetricFamily' has been deleted."):
                op()


if __name__ == "__main__":
    unittest.main()


class ArgumentValidationTest(unittest.TestCase):
    """The exception types Triton's pb_utils raises for bad arguments
    (python_backend's argument_validation test)."""

    def test_inference_response(self):
        with self.assertRaises(pb.TritonModelException):
            pb.InferenceResponse(output_tensors=[None])
        with self.assertRaises(TypeError):
            pb.InferenceResponse(output_tensors=None)
        pb.InferenceResponse(output_tensors=[])
        pb.InferenceResponse([pb.Tensor("OUTPUT0", np.asarray([1, 2], dtype=np.int32))])
        self.assertEqual(pb.InferenceResponse(error=pb.TritonError("e")).output_tensors(), [])

    def test_tensor(self):
        arr = np.asarray([1, 2], dtype=np.int32)
        with self.assertRaises(TypeError):
            pb.Tensor(None, arr)
        with self.assertRaises(TypeError):
            pb.Tensor("OUTPUT0", None)
        with self.assertRaises(TypeError):
            pb.Tensor("", None)
        with self.assertRaises(pb.TritonModelException):
            pb.Tensor.from_dlpack("OUTPUT0", None)
        with self.assertRaises(pb.TritonModelException):
            pb.Tensor.from_dlpack("", None)

    def test_logger(self):
        logger = pb.Logger
        with self.assertRaises(TypeError):
            logger.log("Invalid Level", None)
        with self.assertRaises(TypeError):
            logger.log("Invalid Level", 1)
        for f in (logger.log_info, logger.log_warn, logger.log_error, logger.log_verbose):
            with self.assertRaises(TypeError):
                f(None)
        logger.log("Level unspecified")
        logger.log("explicit level", pb.Logger.LogLevel.WARNING)
