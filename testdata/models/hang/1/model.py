"""hang: never returns from execute when asked (execute-timeout handling)."""

import json
import threading

import triton_python_backend_utils as pb_utils


def wants_hang(request):
    hang = pb_utils.get_input_tensor_by_name(request, "HANG")
    if hang is not None and bool(hang.as_numpy().reshape(-1)[0]):
        return True
    return bool(json.loads(request.parameters()).get("hang", False))


class TritonPythonModel:
    def initialize(self, args):
        self.never = threading.Event()

    def execute(self, requests):
        if any(wants_hang(r) for r in requests):
            pb_utils.Logger.log_warn("hang: blocking execute forever, as asked")
            self.never.wait()
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]
