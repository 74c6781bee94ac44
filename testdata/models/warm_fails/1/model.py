"""warm_fails: every execute answers with an error, so its warmup fails."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(error=pb_utils.TritonError("An Error Occurred")) for _ in requests]
