"""kill_self: dies by SIGKILL mid-request when asked (crash handling)."""

import json
import os
import signal

import triton_python_backend_utils as pb_utils


def wants_kill(request):
    kill = pb_utils.get_input_tensor_by_name(request, "KILL")
    if kill is not None and bool(kill.as_numpy().reshape(-1)[0]):
        return True
    return bool(json.loads(request.parameters()).get("kill", False))


class TritonPythonModel:
    def execute(self, requests):
        if any(wants_kill(r) for r in requests):
            os.kill(os.getpid(), signal.SIGKILL)
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]
