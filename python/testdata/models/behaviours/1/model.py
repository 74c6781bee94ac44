"""behaviours: one mode per request parameter "mode", to check the stub's
handling of execute's return value, the response sender in a
non-decoupled model, parameters and logging."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


def respond(value):
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.array([value], dtype=np.int32))])


class TritonPythonModel:
    def initialize(self, args):
        self.args = dict(args)

    def execute(self, requests):
        mode = json.loads(requests[0].parameters()).get("mode", "echo")
        return getattr(self, "mode_" + mode)(requests)

    def mode_echo(self, requests):
        return [respond(len(r.inputs())) for r in requests]

    def mode_args(self, requests):
        data = np.array([json.dumps(self.args, sort_keys=True).encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]) for _ in requests]

    def mode_model_dir(self, requests):
        data = np.array([pb_utils.get_model_dir().encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]) for _ in requests]

    def mode_sender(self, requests):
        for r in requests:
            r.get_response_sender().send(respond(7), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return [None] * len(requests)

    def mode_sender_twice(self, requests):
        sender = requests[0].get_response_sender()
        sender.send(respond(1))
        sender.send(respond(2))

    def mode_final_first(self, requests):
        requests[0].get_response_sender().send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def mode_bad_flag(self, requests):
        requests[0].get_response_sender().send(respond(1), flags=5)

    def mode_sent_and_returned(self, requests):
        requests[0].get_response_sender().send(respond(1), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return [respond(2)]

    def mode_late_sender(self, requests):
        # Keep the request; the next execute tries to answer it again.
        self.kept = requests[0]
        return [respond(1)]

    def mode_use_late_sender(self, requests):
        try:
            self.kept.get_response_sender().send(respond(2), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            text = "sent"
        except pb_utils.TritonModelException as e:
            text = str(e)
        data = np.array([text.encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]) for _ in requests]

    def mode_reschedule(self, requests):
        # Every odd request goes back to the scheduler; the others answer.
        out = []
        for i, r in enumerate(requests):
            if i % 2:
                r.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                out.append(None)
            else:
                out.append(respond(i))
        return out

    def mode_write_input(self, requests):
        # A model may write into its input's array and return it.
        out = []
        for r in requests:
            array = r.inputs()[0].as_numpy()
            array += 1
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", array)]))
        return out

    def mode_dict(self, requests):
        return {"not": "a list"}

    def mode_short(self, requests):
        return []

    def mode_not_response(self, requests):
        return [1] * len(requests)

    def mode_params(self, requests):
        responses = []
        for r in requests:
            data = np.array([r.parameters().encode()], dtype=np.object_)
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUTPUT0", data)], parameters={"answer": 42, "label": "x", "ok": True}
                )
            )
        return responses

    def mode_bad_params(self, requests):
        return [pb_utils.InferenceResponse([], parameters={"f": 1.5})]

    def mode_log(self, requests):
        pb_utils.Logger.log_warn("behaviours: a warning")
        return [respond(0) for _ in requests]

    def mode_huge_log(self, requests):
        pb_utils.Logger.log_info("y" * 1_000_000)
        return [respond(0) for _ in requests]

    def mode_outputs(self, requests):
        # Three outputs; the stub keeps only the requested ones.
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor(n, np.array([i], dtype=np.int32)) for i, n in enumerate(("A", "B", "C"))]
            )
            for _ in requests
        ]

    def mode_optional(self, requests):
        missing = pb_utils.get_input_tensor_by_name(requests[0], "ABSENT") is None
        return [respond(int(missing)) for _ in requests]

    def mode_correlation(self, requests):
        values = [str(r.correlation_id()) + ":" + type(r.correlation_id()).__name__ for r in requests]
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.array([v.encode()], dtype=np.object_))])
            for v in values
        ]

    def mode_async(self, requests):
        async def run():
            return [respond(9) for _ in requests]

        return run()

    def mode_noncontiguous(self, requests):
        a = np.arange(12, dtype=np.int32).reshape(3, 4).T
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", a)]) for _ in requests]

    def mode_bls_in_init(self, requests):
        return [respond(0)]
