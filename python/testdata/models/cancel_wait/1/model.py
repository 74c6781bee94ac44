"""cancel_wait: execute polls request.is_cancelled() until the server
cancels the request (at most 10 s), then answers CANCELLED."""

import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        deadline = time.monotonic() + 10
        request = requests[0]
        while not request.is_cancelled():
            if time.monotonic() > deadline:
                return [pb_utils.InferenceResponse(error=pb_utils.TritonError("never cancelled"))]
            time.sleep(0.001)
        return [
            pb_utils.InferenceResponse(error=pb_utils.TritonError("cancelled", pb_utils.TritonError.CANCELLED))
            for _ in requests
        ]
