"""identity_timeout: OUTPUT0 = INPUT0. Logs "Request timeout: <us>" for
every request (Triton's identity_fp32_timeout does) and sleeps for the
request parameter "sleep_ms", so tests can keep the instance busy."""

import json
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            pb_utils.Logger.log_info("Request timeout: %d" % request.timeout())
            time.sleep(int(json.loads(request.parameters()).get("sleep_ms", 0)) / 1000)
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses
