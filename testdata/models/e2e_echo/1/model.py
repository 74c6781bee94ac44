"""e2e_echo: echoes INPUT0 and the request parameters; can be made slow.

The end-to-end tests use it for request/response parameters and for
graceful shutdown: a request with "sleep_ms" is still in execute when the
server gets SIGTERM, and finalize logs "e2e_echo: finalize ran" once it is
answered.
"""

import json
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.logger = pb_utils.Logger

    def execute(self, requests):
        responses = []
        for request in requests:
            params = json.loads(request.parameters() or "{}")
            sleep_ms = params.get("sleep_ms", 0)
            if sleep_ms:
                time.sleep(sleep_ms / 1000.0)
            echoed = {k: v for k, v in params.items() if isinstance(v, (bool, int, str))}
            echoed["echoed_by"] = "e2e_echo"
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)], parameters=echoed)
            )
        return responses

    def finalize(self):
        self.logger.log_info("e2e_echo: finalize ran")
