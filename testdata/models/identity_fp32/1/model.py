"""identity_fp32: OUTPUT0 = INPUT0, the smallest possible execute.

It is the model the latency benchmarks measure, so it does nothing but
hand the input array back.
"""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", request.inputs()[0].as_numpy())])
            for request in requests
        ]
