"""The stub host end to end: a real stub process on a real region, with the
test playing the supervisor."""

import json
import os
import signal
import tempfile
import unittest

import numpy as np

from .stubharness import ADD_SUB_CONFIG, MODELS, REPEAT_CONFIG, TEST_MODELS, WAIT, K, Stub, ipc

FINAL = ipc.FLAG_FINAL

# A model answering each request with N one-element outputs.
FANOUT_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            n = int(pb_utils.get_input_tensor_by_name(r, "N").as_numpy()[0])
            out.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT%d" % i, np.array([i], np.float32)) for i in range(n)]))
        return out
"""


class StubTest(unittest.TestCase):
    def start(self, instance):
        stub = Stub(instance)
        self.addCleanup(stub.close)
        return stub

    def loaded(self, model, instance=None, config=None, decoupled=False, models=MODELS):
        stub = self.start(instance or model + "_0_0")
        reply = stub.initialize(os.path.join(models, model), config=config, decoupled=decoupled)
        self.assertEqual(reply[2], None, reply)
        return stub


class LifecycleTest(StubTest):
    def test_hello(self):
        stub = self.start("hello_0_0")
        kind, _, version, pid, info = stub.hello
        self.assertEqual(version, ipc.PROTOCOL_VERSION)
        self.assertEqual(pid, stub.proc.pid)
        self.assertEqual(set(info), {"python", "numpy"})

    def test_initialize_passes_seven_args(self):
        stub = self.loaded("behaviours", models=TEST_MODELS)
        batch = stub.execute([stub.request(1, [], params={"mode": "args"})])
        done = stub.expect(K.KIND_EXECUTE_DONE)
        self.assertEqual(done[1], batch)
        args = json.loads(stub.read(done[3][0][3][0])[0])
        self.assertEqual(sorted(args), ["model_config", "model_instance_device_id", "model_instance_kind",
                                        "model_instance_name", "model_name", "model_repository", "model_version"])
        self.assertEqual(args["model_instance_name"], "behaviours_0_0")

    def test_get_model_dir_is_version_dir(self):
        stub = self.loaded("behaviours", models=TEST_MODELS)
        stub.execute([stub.request(1, [], params={"mode": "model_dir"})])
        done = stub.expect(K.KIND_EXECUTE_DONE)
        self.assertEqual(stub.read(done[3][0][3][0])[0].decode(), os.path.join(TEST_MODELS, "behaviours", "1"))

    def test_init_fails_carries_text_and_traceback(self):
        stub = self.start("init_fails_0_0")
        reply = stub.initialize(os.path.join(MODELS, "init_fails"))
        code, text = reply[2]
        self.assertEqual(code, 1)
        self.assertIn("ValueError: init_fails: initialize refuses to load this model (instance init_fails_0_0)", text)
        self.assertIn("init_fails/1/model.py", text)
        self.assertIn("check_resources", text)

    def test_missing_model_file(self):
        stub = self.start("nope_0_0")
        reply = stub.initialize(os.path.join(MODELS, "add_sub"), model_file="/nonexistent/1/model.py")
        self.assertEqual(reply[2], [1, "Python model file not found in '/nonexistent/1/model.py'"])

    def test_auto_complete(self):
        stub = self.start("auto_complete")
        msg_id = stub.new_id()
        stub.sup.send([K.KIND_AUTO_COMPLETE, msg_id,
                       {"model_file": os.path.join(MODELS, "auto_complete", "1", "model.py")},
                       json.dumps({"name": "auto_complete", "max_batch_size": 0, "input": [], "output": []})])
        reply = stub.expect(K.KIND_RESULT)
        self.assertEqual(reply[:3], [K.KIND_RESULT, msg_id, None])
        config = json.loads(reply[3])
        self.assertEqual(config["input"], [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}])
        self.assertEqual(config["output"], [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}])
        self.assertEqual(config["max_batch_size"], 8)
        self.assertEqual(config["dynamic_batching"], {})

    def test_is_ready_and_finalize(self):
        stub = self.loaded("add_sub", config=ADD_SUB_CONFIG)
        msg_id = stub.new_id()
        stub.sup.send([K.KIND_IS_READY, msg_id])
        self.assertEqual(stub.expect(K.KIND_RESULT), [K.KIND_RESULT, msg_id, None, True])
        self.assertEqual(stub.finalize(), 0)
        self.assertIn("add_sub: finalize", [log[3] for log in stub.logs])

    def test_collect_metrics(self):
        stub = self.loaded("custom_metrics")
        for i, v in enumerate((5.0, 50.0)):
            stub.execute([stub.request(i, [stub.tensor("IN", 11, np.array([v], np.float32))])])
            stub.release(stub.expect(K.KIND_EXECUTE_DONE)[3][0])
        msg_id = stub.new_id()
        stub.sup.send([K.KIND_COLLECT_METRICS, msg_id])
        kind, got_id, error, families = stub.expect(K.KIND_RESULT)
        self.assertEqual((got_id, error), (msg_id, None))
        by_name = {f[0]: f for f in families}
        labels = {"model": "custom_metrics"}
        self.assertEqual(by_name["custom_requests_total"][2], 0)
        self.assertEqual(by_name["custom_requests_total"][3], [[labels, 2.0, None, None, 0.0, 0]])
        self.assertEqual(by_name["custom_last_in"][3][0][1], 50.0)
        name, description, kind, metrics = by_name["custom_in"]
        self.assertEqual((description, kind), ("IN values", 2))
        self.assertEqual(metrics, [[labels, 0.0, [1.0, 10.0, 100.0], [0, 1, 2, 2], 55.0, 2]])

    def test_exits_when_supervisor_marks_region_dead(self):
        stub = self.loaded("add_sub", config=ADD_SUB_CONFIG)
        stub.sup.mark_dead()
        self.assertEqual(stub.proc.wait(WAIT), 1)

    def test_ignores_sigterm(self):
        stub = self.loaded("add_sub", config=ADD_SUB_CONFIG)
        stub.proc.send_signal(signal.SIGTERM)
        msg_id = stub.new_id()
        stub.sup.send([K.KIND_IS_READY, msg_id])
        self.assertEqual(stub.expect(K.KIND_RESULT)[3], True)

    def test_kill_self(self):
        stub = self.loaded("kill_self")
        kill = stub.tensor("KILL", 1, np.array([True]))
        stub.execute([stub.request(1, [stub.tensor("INPUT0", 11, np.ones(2)), kill])])
        self.assertEqual(stub.proc.wait(WAIT), -signal.SIGKILL)


class ExecuteTest(StubTest):
    def add_sub_request(self, stub, handle, a, b, requested=()):
        return stub.request(handle, [stub.tensor("INPUT0", 11, a), stub.tensor("INPUT1", 11, b)], requested)

    def test_add_sub_batch(self):
        stub = self.loaded("add_sub", config=ADD_SUB_CONFIG)
        a = np.array([1, 2, 3, 4], np.float32)
        b = np.array([0.5, 0.5, 1, 1], np.float32)
        batch = stub.execute([self.add_sub_request(stub, 11, a, b), self.add_sub_request(stub, 12, b, a)])
        done = stub.expect(K.KIND_EXECUTE_DONE)
        self.assertEqual(done[1], batch)
        self.assertIsNone(done[2])
        self.assertEqual([r[0] for r in done[3]], [11, 12])
        for resp, (x, y) in zip(done[3], ((a, b), (b, a))):
            self.assertEqual(resp[1], FINAL)
            self.assertIsNone(resp[2])
            outs = {t[0]: t for t in resp[3]}
            # 16 bytes travel in the message: no block to allocate or release.
            self.assertEqual(outs["OUTPUT0"][3], ipc.LOC_INLINE)
            np.testing.assert_array_equal(stub.read(outs["OUTPUT0"]), x + y)
            np.testing.assert_array_equal(stub.read(outs["OUTPUT1"]), x - y)
        self.assertEqual(stub.stub_in_use(), 0)

    def test_large_outputs_go_to_the_arena(self):
        stub = self.loaded("add_sub", config=ADD_SUB_CONFIG)
        big = np.arange(ipc.INLINE_MAX // 4 + 1, dtype=np.float32)  # one element past inline
        stub.execute([self.add_sub_request(stub, 1, big, big, requested=["OUTPUT0"])])
        resp = stub.expect(K.KIND_EXECUTE_DONE)[3][0]
        self.assertEqual(resp[3][0][3], ipc.LOC_ARENA1)
        np.testing.assert_array_equal(stub.read(resp[3][0]), big + big)
        self.assertGreater(stub.stub_in_use(), 0)
        stub.release(resp)
        stub.wait_stub_in_use(0)

    def test_returned_input_is_sent_in_place(self):
        # identity_fp32 returns its input's array: the output is described
        # as the input's own block in arena 0, not copied into arena 1.
        stub = self.loaded("identity_fp32")
        big = np.arange(ipc.INLINE_MAX // 4 + 1, dtype=np.float32)
        t = stub.tensor("INPUT0", 11, big)
        stub.execute([stub.request(1, [t])])
        resp = stub.expect(K.KIND_EXECUTE_DONE)[3][0]
        self.assertEqual(resp[3][0], ["OUTPUT0", 11, [big.size], ipc.LOC_ARENA0, t[4], t[5]])
        np.testing.assert_array_equal(stub.read(resp[3][0]), big)
        self.assertEqual(stub.stub_in_use(), 0)

    def test_inline_inputs(self):
        # Inputs of at most INLINE_MAX bytes come in the message, as the
        # supervisor sends them: the same arrays, and no block anywhere.
        stub = self.loaded("add_sub", config=ADD_SUB_CONFIG)
        a = np.arange(ipc.INLINE_MAX // 4, dtype=np.float32)  # INLINE_MAX bytes
        b = np.full(a.size, 0.5, np.float32)
        req = stub.request(1, [stub.tensor("INPUT0", 11, a, inline=True), stub.tensor("INPUT1", 11, b, inline=True)])
        self.assertEqual([t[3] for t in req[4]], [ipc.LOC_INLINE] * 2)
        stub.execute([req])
        resp = stub.expect(K.KIND_EXECUTE_DONE)[3][0]
        outs = {t[0]: t for t in resp[3]}
        np.testing.assert_array_equal(stub.read(outs["OUTPUT0"]), a + b)
        np.testing.assert_array_equal(stub.read(outs["OUTPUT1"]), a - b)
        self.assertEqual(stub.stub_in_use(), 0)
        self.assertEqual(stub.sup.usage()[0]["in_use"], 0)

    def test_inputs_are_writable(self):
        # A model may write into an input's array, wherever its bytes came.
        stub = self.loaded("behaviours", models=TEST_MODELS)
        for n, inline in ((4, True), (ipc.INLINE_MAX, False)):
            with self.subTest(inline=inline):
                values = np.arange(n, dtype=np.int32)
                stub.execute([stub.request(1, [stub.tensor("INPUT0", 8, values, inline)],
                                           params={"mode": "write_input"})])
                resp = stub.expect(K.KIND_EXECUTE_DONE)[3][0]
                self.assertIsNone(resp[2], resp)
                np.testing.assert_array_equal(stub.read(resp[3][0]), values + 1)
                stub.release(resp)

    def test_returned_inline_input_is_sent_inline(self):
        # identity_fp32 returning a small input that came in the message:
        # its output goes back in the message too.
        stub = self.loaded("identity_fp32")
        small = np.arange(16, dtype=np.float32)
        stub.execute([stub.request(1, [stub.tensor("INPUT0", 11, small, inline=True)])])
        resp = stub.expect(K.KIND_EXECUTE_DONE)[3][0]
        self.assertEqual(resp[3][0][:6], ["OUTPUT0", 11, [small.size], ipc.LOC_INLINE, 0, small.nbytes])
        np.testing.assert_array_equal(stub.read(resp[3][0]), small)
        self.assertEqual(stub.stub_in_use(), 0)

    def test_requested_outputs_pruned(self):
        stub = self.loaded("add_sub", config=ADD_SUB_CONFIG)
        a = np.ones(4, np.float32)
        stub.execute([self.add_sub_request(stub, 1, a, a, requested=["OUTPUT1"])])
        done = stub.expect(K.KIND_EXECUTE_DONE)
        self.assertEqual([t[0] for t in done[3][0][3]], ["OUTPUT1"])

    def test_identity_all_dtypes(self):
        stub = self.loaded("identity_all")
        values = {
            "BOOL": (1, np.array([True, False, True])),
            "UINT8": (2, np.array([0, 255], np.uint8)),
            "UINT16": (3, np.array([1, 65535], np.uint16)),
            "UINT32": (4, np.array([7, 2**32 - 1], np.uint32)),
            "UINT64": (5, np.array([2**64 - 1], np.uint64)),
            "INT8": (6, np.array([-128, 127], np.int8)),
            "INT16": (7, np.array([-3], np.int16)),
            "INT32": (8, np.array([-(2**31)], np.int32)),
            "INT64": (9, np.array([-(2**63), 5], np.int64)),
            "FP16": (10, np.array([0.5, -2.25], np.float16)),
            "FP32": (11, np.array([1.5, np.inf], np.float32)),
            "FP64": (12, np.array([np.pi], np.float64)),
            "BF16": (14, np.array([0x3F80, 0xC000], np.uint16)),  # 1.0, -2.0 as raw bfloat16
        }
        for inline in (False, True):  # inputs in arena 0, or in the message
            with self.subTest(inline=inline):
                inputs = [stub.tensor("INPUT_" + k, dt, v, inline) for k, (dt, v) in values.items()]
                inputs.append(stub.tensor("INPUT_STRING", 13, [b"hello", b"", b"\x00bin\xff"], inline))
                stub.execute([stub.request(1, inputs)])
                done = stub.expect(K.KIND_EXECUTE_DONE)
                self.assertIsNone(done[2], done)
                outs = {t[0]: t for t in done[3][0][3]}
                for k, (dt, v) in values.items():
                    t = outs["OUTPUT_" + k]
                    self.assertEqual(t[1], dt, k)
                    np.testing.assert_array_equal(stub.read(t), v.astype(stub.read(t).dtype), k)
                self.assertEqual(outs["OUTPUT_STRING"][1], 13)
                self.assertEqual(stub.read(outs["OUTPUT_STRING"]), [b"hello", b"", b"\x00bin\xff"])

    def test_empty_and_noncontiguous_outputs(self):
        stub = self.loaded("behaviours", models=TEST_MODELS)
        stub.execute([stub.request(1, [], params={"mode": "noncontiguous"})])
        done = stub.expect(K.KIND_EXECUTE_DONE)
        t = done[3][0][3][0]
        np.testing.assert_array_equal(stub.read(t), np.arange(12, dtype=np.int32).reshape(3, 4).T)
        stub2 = self.loaded("identity_fp32", instance="identity_fp32_0_1")
        stub2.execute([stub2.request(1, [stub2.tensor("INPUT0", 11, np.zeros(0, np.float32))])])
        done = stub2.expect(K.KIND_EXECUTE_DONE)
        self.assertEqual(done[3][0][3], [["OUTPUT0", 11, [0], ipc.LOC_NONE, 0, 0]])

    def test_rescheduled_requests_are_listed(self):
        stub = self.loaded("behaviours", models=TEST_MODELS)
        stub.execute([stub.request(h, [], params={"mode": "reschedule"}) for h in (5, 6, 7, 8)])
        done = stub.expect(K.KIND_EXECUTE_DONE)
        self.assertEqual([r[0] for r in done[3]], [5, 7])
        self.assertEqual(done[4], [6, 8])
        # Without a rescheduled request the message keeps its short form.
        stub.execute([stub.request(9, [], params={"mode": "reschedule"})])
        self.assertEqual(len(stub.expect(K.KIND_EXECUTE_DONE)), 4)

    def test_execute_raises_fails_batch(self):
        stub = self.loaded("execute_raises")
        batch = stub.execute([stub.request(1, [stub.tensor("INPUT0", 11, np.ones(1))]),
                              stub.request(2, [stub.tensor("INPUT0", 11, np.ones(1))])])
        done = stub.expect(K.KIND_EXECUTE_DONE)
        self.assertEqual(done[1], batch)
        self.assertEqual(done[3], [])
        code, text = done[2]
        self.assertEqual(code, 1)
        self.assertTrue(text.startswith(
            "Failed to process the request(s) for model 'execute_raises_0_0', message: RuntimeError: "
            "execute_raises: failing a batch of 2 request(s) on purpose"), text)
        self.assertIn("execute_raises/1/model.py", text)

    def test_error_codes_pass_through(self):
        stub = self.loaded("error_codes")
        names = ["UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE", "UNSUPPORTED",
                 "ALREADY_EXISTS", "CANCELLED"]
        requests = [stub.request(i, [stub.tensor("CODE", 13, [n.encode()])]) for i, n in enumerate(names)]
        requests.append(stub.request(99, [], params={"error_code": "NOT_FOUND"}))
        stub.execute(requests)
        done = stub.expect(K.KIND_EXECUTE_DONE)
        got = [(r[0], r[2]) for r in done[3]]
        want = [(i, [i, "error_codes: " + n]) for i, n in enumerate(names)] + [(99, [2, "error_codes: NOT_FOUND"])]
        self.assertEqual(got, want)

    def test_return_value_validation(self):
        cases = {
            "dict": "Expected a list in the execute return, found type '<class 'dict'>'.",
            "short": "Number of InferenceResponse objects do not match the number of InferenceRequest objects. "
                     "InferenceRequest(s) size is:1, and InferenceResponse(s) size is:0\n",
            "not_response": "Expected an 'InferenceResponse' object in the execute function return list, "
                            "found type '<class 'int'>'.",
            "sender_twice": "Unable to send response. Non-decoupled model cannot send more than one response.",
            "final_first": "Unable to send response. Non-decoupled model cannot send complete final before "
                           "sending a response.",
            "bad_flag": "Unable to send response. Unsupported flag provided.",
            "sent_and_returned": "Unable to send response. Non-decoupled model cannot send more than one response.",
            "bad_params": "Expect parameters values to have type bool/int/str, found type <class 'float'>",
        }
        stub = self.loaded("behaviours", models=TEST_MODELS)
        prefix = "Failed to process the request(s) for model 'behaviours_0_0', message: "
        for mode, text in cases.items():
            with self.subTest(mode=mode):
                stub.execute([stub.request(1, [], params={"mode": mode})])
                while True:
                    msg = stub.recv()
                    if msg[0] == K.KIND_EXECUTE_DONE:
                        break
                self.assertEqual(msg[3], [])
                self.assertTrue(msg[2][1].startswith(prefix), msg[2][1])
                self.assertIn(text, msg[2][1])

    def test_non_decoupled_sender(self):
        stub = self.loaded("behaviours", models=TEST_MODELS)
        stub.execute([stub.request(5, [], params={"mode": "sender"})])
        resp = stub.expect(K.KIND_RESPONSE)[2]
        self.assertEqual(resp[:3], [5, FINAL, None])
        self.assertEqual(stub.read(resp[3][0]).tolist(), [7])
        self.assertEqual(stub.expect(K.KIND_EXECUTE_DONE)[2:], [None, []])

    def test_no_sending_after_returned_response(self):
        stub = self.loaded("behaviours", models=TEST_MODELS)
        stub.execute([stub.request(1, [], params={"mode": "late_sender"})])
        stub.expect(K.KIND_EXECUTE_DONE)
        stub.execute([stub.request(2, [], params={"mode": "use_late_sender"})])
        resp = stub.expect(K.KIND_EXECUTE_DONE)[3][0]
        self.assertEqual(stub.read(resp[3][0]), [b"Unable to send response. Response sender has been closed."])

    def test_parameters_both_ways(self):
        stub = self.loaded("behaviours", models=TEST_MODELS)
        stub.execute([stub.request(1, [], params={"mode": "params", "n": 3, "flag": True})])
        resp = stub.expect(K.KIND_EXECUTE_DONE)[3][0]
        self.assertEqual(json.loads(stub.read(resp[3][0])[0]), {"mode": "params", "n": 3, "flag": True})
        self.assertEqual(json.loads(resp[4]), {"answer": 42, "label": "x", "ok": True})

    def test_one_output_modes(self):
        # optional: an optional input left out reads as None (the model
        # answers [1]); async: a coroutine execute of a non-decoupled model
        # is awaited (it answers [9]).
        for mode, want in (("optional", [1]), ("async", [9])):
            with self.subTest(mode=mode):
                stub = self.loaded("behaviours", models=TEST_MODELS)
                stub.execute([stub.request(1, [], params={"mode": mode})])
                resp = stub.expect(K.KIND_EXECUTE_DONE)[3][0]
                self.assertEqual(stub.read(resp[3][0]).tolist(), want)

    def test_requested_subset_of_many(self):
        stub = self.loaded("behaviours", models=TEST_MODELS)
        stub.execute([stub.request(1, [], requested=["C", "A"], params={"mode": "outputs"})])
        resp = stub.expect(K.KIND_EXECUTE_DONE)[3][0]
        self.assertEqual(sorted(t[0] for t in resp[3]), ["A", "C"])

    def test_correlation_id_int_or_str(self):
        stub = self.loaded("behaviours", models=TEST_MODELS)
        stub.execute([stub.request(1, [], params={"mode": "correlation"}, correlation_id=42),
                      stub.request(2, [], correlation_id="seq-a")])
        done = stub.expect(K.KIND_EXECUTE_DONE)
        self.assertEqual([stub.read(r[3][0])[0] for r in done[3]], [b"42:int", b"seq-a:str"])

    def test_logger_sends_file_and_line(self):
        stub = self.loaded("behaviours", models=TEST_MODELS)
        stub.execute([stub.request(1, [], params={"mode": "log"})])
        stub.expect(K.KIND_EXECUTE_DONE)
        logs = [log for log in stub.logs if log[3] == "behaviours: a warning"]
        self.assertEqual(len(logs), 1)
        _, _, level, _, filename, line = logs[0]
        self.assertEqual((level, filename), ("WARNING", "model.py"))
        with open(os.path.join(TEST_MODELS, "behaviours", "1", "model.py")) as f:
            source = f.read().splitlines()
        self.assertIn("log_warn", source[line - 1])

    def test_huge_log_line_is_clipped(self):
        stub = self.loaded("behaviours", models=TEST_MODELS)
        stub.execute([stub.request(1, [], params={"mode": "huge_log"})])
        self.assertIsNone(stub.expect(K.KIND_EXECUTE_DONE)[2])
        message = [log for log in stub.logs if log[3].startswith("yyy")][0][3]
        self.assertTrue(message.endswith("... (983616 more characters)"), message[-40:])

    def test_cancel_seen_during_execute(self):
        stub = self.loaded("cancel_wait", models=TEST_MODELS)
        stub.execute([stub.request(77, [])])
        stub.sup.send([K.KIND_CANCEL, 77])
        done = stub.expect(K.KIND_EXECUTE_DONE)
        self.assertEqual(done[3][0][2], [7, "cancelled"])


class DecoupledTest(StubTest):
    def test_repeat(self):
        for inline in (False, True):  # inputs in arena 0, or in the message
            with self.subTest(inline=inline):
                self.repeat(inline)

    def repeat(self, inline):
        stub = self.loaded("repeat_decoupled", config=REPEAT_CONFIG, decoupled=True)
        values = np.array([4, 5, 6], np.int32)
        stub.execute([stub.request(3, [stub.tensor("IN", 8, values, inline),
                                       stub.tensor("DELAY", 4, np.array([1, 1, 1], np.uint32), inline),
                                       stub.tensor("WAIT", 4, np.array([0], np.uint32), inline)])])
        responses, done = [], None
        while True:
            msg = stub.recv()
            if msg[0] == K.KIND_EXECUTE_DONE:
                done = msg
            elif msg[0] == K.KIND_RESPONSE:
                responses.append(msg[2])
                if msg[2][1] & FINAL:
                    break
        if done is None:
            done = stub.expect(K.KIND_EXECUTE_DONE)
        self.assertEqual(done[2:], [None, []])
        self.assertEqual(responses[-1], [3, FINAL, None, [], ""])
        got = []
        for resp in responses[:-1]:
            self.assertEqual(resp[1], 0)
            outs = {t[0]: stub.read(t) for t in resp[3]}
            got.append((int(outs["IDX"][0]), int(outs["OUT"][0])))
            stub.release(resp)
        self.assertEqual(got, [(0, 4), (1, 5), (2, 6)])
        stub.wait_stub_in_use(0)

    def test_decoupled_must_return_none(self):
        stub = self.loaded("add_sub", instance="add_sub_0_0", config=ADD_SUB_CONFIG, decoupled=True)
        a = stub.tensor("INPUT0", 11, np.ones(4))
        b = stub.tensor("INPUT1", 11, np.ones(4))
        stub.execute([stub.request(1, [a, b])])
        done = stub.expect(K.KIND_EXECUTE_DONE)
        self.assertIn("Python model 'add_sub_0_0' is using the decoupled mode and the execute function must "
                      "return None.", done[2][1])

    def test_async_decoupled(self):
        stub = self.loaded("decoupled_async", models=TEST_MODELS, decoupled=True)
        stub.execute([stub.request(8, [stub.tensor("COUNT", 8, np.array([2], np.int32))])])
        self.assertEqual(stub.expect(K.KIND_EXECUTE_DONE)[2:], [None, []])
        first = stub.expect(K.KIND_RESPONSE)[2]
        second = stub.expect(K.KIND_RESPONSE)[2]
        final = stub.expect(K.KIND_RESPONSE)[2]
        self.assertEqual([stub.read(first[3][0]).tolist(), stub.read(second[3][0]).tolist()], [[0], [1]])
        self.assertEqual(final, [8, FINAL, None, [], ""])

    def test_async_decoupled_failure_ends_requests(self):
        stub = self.loaded("decoupled_async", models=TEST_MODELS, decoupled=True)
        stub.execute([stub.request(9, [stub.tensor("COUNT", 8, np.array([-1], np.int32))])])
        # The coroutine fails on the loop thread, so its final response and
        # the main thread's ExecuteDone may come in either order.
        got = {}
        while len(got) < 2:
            msg = stub.recv(WAIT)
            if msg[0] != K.KIND_LOG:
                self.assertIn(msg[0], (K.KIND_EXECUTE_DONE, K.KIND_RESPONSE))
                got[msg[0]] = msg
        final = got[K.KIND_RESPONSE][2]
        self.assertEqual(final[:2], [9, FINAL])
        self.assertEqual(final[2][0], 1)
        self.assertIn("ValueError: decoupled_async: negative count", final[2][1])


class BLSTest(StubTest):
    def serve_add_sub(self, stub, msg, error=None, inline=False):
        """Answer an InferExec for add_sub as the supervisor would (with
        inline, the outputs in the message, as it sends small ones)."""
        kind, call_id, model, version, request, decoupled = msg
        self.assertEqual((kind, model, version, decoupled), (K.KIND_INFER_EXEC, "add_sub", -1, False))
        self.assertEqual(json.loads(request[6]), {"origin": "bls_caller"})
        ins = {t[0]: stub.read(t) for t in request[4]}
        self.assertTrue(all(t[3] == ipc.LOC_INLINE for t in request[4]))
        if error:
            stub.sup.send([K.KIND_INFER_RESULT, call_id, [call_id, FINAL, error, [], ""]])
            return []
        outs = []
        for name, value in (("OUTPUT0", ins["INPUT0"] + ins["INPUT1"]), ("OUTPUT1", ins["INPUT0"] - ins["INPUT1"])):
            if name in request[5]:
                outs.append(stub.tensor(name, 11, value, inline))
        stub.sup.send([K.KIND_INFER_RESULT, call_id, [call_id, FINAL, None, outs, ""]])
        return [t[4] for t in outs if t[3] != ipc.LOC_INLINE]

    def bls_request(self, stub, handle, mode, inline=False):
        a = stub.tensor("INPUT0", 11, np.array([1, 2, 3, 4], np.float32), inline)
        b = stub.tensor("INPUT1", 11, np.array([1, 1, 1, 1], np.float32), inline)
        return stub.request(handle, [a, b], params={"mode": mode})

    def test_sync(self):
        stub = self.loaded("bls_caller", models=TEST_MODELS)
        for inline in (False, True):  # the caller's inputs in arena 0, or in the message
            with self.subTest(inline=inline):
                stub.execute([self.bls_request(stub, 1, "sync", inline)])
                given = self.serve_add_sub(stub, stub.expect(K.KIND_INFER_EXEC))
                done = stub.expect(K.KIND_EXECUTE_DONE)
                np.testing.assert_array_equal(stub.read(done[3][0][3][0]), [20, 30, 40, 50])
                # The BLS output block comes back once the model dropped it.
                self.assertEqual(sorted(stub.expect(K.KIND_FREE)[2]), sorted(given))

    def test_sync_inline_outputs(self):
        stub = self.loaded("bls_caller", models=TEST_MODELS)
        for _ in range(2):
            stub.execute([self.bls_request(stub, 1, "sync", True)])
            self.assertEqual(self.serve_add_sub(stub, stub.expect(K.KIND_INFER_EXEC), inline=True), [])
            done = stub.expect(K.KIND_EXECUTE_DONE)
            np.testing.assert_array_equal(stub.read(done[3][0][3][0]), [20, 30, 40, 50])

    def test_error(self):
        stub = self.loaded("bls_caller", models=TEST_MODELS)
        stub.execute([self.bls_request(stub, 1, "error")])
        self.serve_add_sub(stub, stub.expect(K.KIND_INFER_EXEC), error=[2, "Request for unknown model: 'add_sub'"])
        done = stub.expect(K.KIND_EXECUTE_DONE)
        self.assertEqual(done[3][0][2], [2, "Request for unknown model: 'add_sub'"])

    def test_async(self):
        stub = self.loaded("bls_caller", models=TEST_MODELS)
        stub.execute([self.bls_request(stub, 1, "async")])
        self.serve_add_sub(stub, stub.expect(K.KIND_INFER_EXEC))
        done = stub.expect(K.KIND_EXECUTE_DONE)
        np.testing.assert_array_equal(stub.read(done[3][0][3][0]), [0, 1, 2, 3])

    def test_async_callback_from_another_thread(self):
        # The loop sleeps on the channel while a call is open; an
        # executor's result (call_soon_threadsafe) still wakes it: the
        # second call comes while the first is unanswered.
        stub = self.loaded("bls_caller", models=TEST_MODELS)
        for _ in range(2):
            stub.execute([self.bls_request(stub, 1, "async_executor")])
            first = stub.expect(K.KIND_INFER_EXEC)
            second = stub.expect(K.KIND_INFER_EXEC)
            self.assertEqual((first[4][5], second[4][5]), (["OUTPUT1"], ["OUTPUT0"]))
            self.serve_add_sub(stub, second, inline=True)
            self.serve_add_sub(stub, first, inline=True)
            done = stub.expect(K.KIND_EXECUTE_DONE)
            np.testing.assert_array_equal(stub.read(done[3][0][3][0]), [6, 10, 14, 18])

    def test_async_on_a_loop_of_the_model(self):
        # async_exec on a loop the model made itself: the pump thread reads.
        stub = self.loaded("bls_caller", models=TEST_MODELS)
        for _ in range(2):
            stub.execute([self.bls_request(stub, 1, "own_loop")])
            self.serve_add_sub(stub, stub.expect(K.KIND_INFER_EXEC), inline=True)
            done = stub.expect(K.KIND_EXECUTE_DONE)
            np.testing.assert_array_equal(stub.read(done[3][0][3][0]), [0, 1, 2, 3])

    def test_decoupled_iterator(self):
        stub = self.loaded("bls_caller", models=TEST_MODELS)
        stub.execute([self.bls_request(stub, 1, "decoupled")])
        _, call_id, model, _, request, decoupled = stub.expect(K.KIND_INFER_EXEC)
        self.assertEqual((model, decoupled), ("repeat", True))
        for i in range(3):
            out = stub.tensor("OUT", 11, np.array([i * 1.5], np.float32))
            stub.sup.send([K.KIND_INFER_RESULT, call_id, [call_id, 0, None, [out], ""]])
        stub.sup.send([K.KIND_INFER_RESULT, call_id, [call_id, FINAL, None, [], ""]])
        done = stub.expect(K.KIND_EXECUTE_DONE)
        np.testing.assert_array_equal(stub.read(done[3][0][3][0]), [0, 1.5, 3])

    def test_bls_outside_execute_rejected(self):
        stub = self.start("x_0_0")
        # No model initialised: BLS calls from pb_utils are refused.
        import triton_python_backend_utils as pb
        with self.assertRaisesRegex(pb.TritonModelException, "BLS is only supported during the 'execute' function."):
            pb.InferenceRequest(model_name="m", inputs=[], requested_output_names=[]).exec()


class MemoryTest(StubTest):
    def test_release_of_unknown_offset_is_ignored(self):
        stub = self.loaded("add_sub", config=ADD_SUB_CONFIG)
        a = stub.tensor("INPUT0", 11, np.ones(512, np.float32))
        stub.execute([stub.request(1, [a, ["INPUT1"] + a[1:]], ["OUTPUT0"])])
        resp = stub.expect(K.KIND_EXECUTE_DONE)[3][0]
        in_use = stub.stub_in_use()
        stub.sup.send([K.KIND_RELEASE, 0, [resp[3][0][4] + 4096, 123456]])
        msg_id = stub.new_id()
        stub.sup.send([K.KIND_IS_READY, msg_id])
        stub.expect(K.KIND_RESULT)
        self.assertEqual(stub.stub_in_use(), in_use)
        stub.release(resp)
        stub.release(resp)  # twice: the second is ignored
        stub.wait_stub_in_use(0)

    def test_many_executes_do_not_leak(self):
        stub = self.loaded("add_sub", config=ADD_SUB_CONFIG)
        data = stub.tensor("INPUT0", 11, np.arange(512, dtype=np.float32))
        for i in range(200):
            stub.execute([stub.request(i, [data, ["INPUT1"] + data[1:]])])
            resp = stub.expect(K.KIND_EXECUTE_DONE)[3][0]
            np.testing.assert_array_equal(stub.read(resp[3][0]), 2 * np.arange(512, dtype=np.float32))
            stub.release(resp)
        stub.wait_stub_in_use(0)

    def test_small_outputs_of_a_batch_stay_within_a_frame(self):
        # Outputs of at most 1 KiB travel in the message, but not more of
        # them than a frame holds: with a 16 KiB ring (8 KiB frames, 2 KiB
        # of them for inline bytes) sixteen 1 KiB outputs must go mostly
        # through the arena.
        stub = Stub("add_sub_0_0", ring_bytes=16384)
        self.addCleanup(stub.close)
        reply = stub.initialize(os.path.join(MODELS, "add_sub"), config=ADD_SUB_CONFIG)
        self.assertEqual(reply[2], None, reply)
        x = np.arange(256, dtype=np.float32)
        reqs = []
        handles = range(1, 9)
        for h in handles:
            a = stub.tensor("INPUT0", 11, x * h)
            b = stub.tensor("INPUT1", 11, x)
            reqs.append(stub.request(h, [a, b], ["OUTPUT0", "OUTPUT1"]))
        stub.execute(reqs)
        done = stub.expect(K.KIND_EXECUTE_DONE)
        responses = done[3]
        self.assertEqual(len(responses), len(handles), done)
        locs = set()
        for h, resp in zip(handles, responses):
            self.assertEqual(resp[2], None, resp)
            out = {t[0]: t for t in resp[3]}
            locs.update(t[3] for t in resp[3])
            np.testing.assert_array_equal(stub.read(out["OUTPUT0"]), x * h + x)
            np.testing.assert_array_equal(stub.read(out["OUTPUT1"]), x * h - x)
            stub.release(resp)
        self.assertEqual(locs, {K.LOC_INLINE, K.LOC_ARENA1})
        stub.wait_stub_in_use(0)

    def test_an_answer_larger_than_a_frame_fails_the_batch(self):
        # Sixteen responses of 32 outputs each do not fit a 4 KiB ring's
        # 2 KiB frame, whatever goes inline: the batch fails with the
        # reason, and the stub goes on serving.
        model_dir = os.path.join(self.enterContext(tempfile.TemporaryDirectory()), "fanout")
        os.makedirs(os.path.join(model_dir, "1"))
        with open(os.path.join(model_dir, "1", "model.py"), "w") as f:
            f.write(FANOUT_MODEL)
        stub = Stub("fanout_0_0", ring_bytes=4096)
        self.addCleanup(stub.close)
        reply = stub.initialize(model_dir)
        self.assertEqual(reply[2], None, reply)
        x = stub.tensor("N", 8, np.array([32], np.int32))
        stub.execute([stub.request(h, [x]) for h in range(1, 17)])
        done = stub.expect(K.KIND_EXECUTE_DONE)
        self.assertEqual(done[3], [], done)
        self.assertIn("frame too large", done[2][1])
        stub.wait_stub_in_use(0)
        x = stub.tensor("N", 8, np.array([2], np.int32))
        stub.execute([stub.request(99, [x])])
        resp = stub.expect(K.KIND_EXECUTE_DONE)[3][0]
        self.assertEqual([t[0] for t in resp[3]], ["OUT0", "OUT1"])
        stub.release(resp)

if __name__ == "__main__":
    unittest.main()
