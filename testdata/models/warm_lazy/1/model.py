"""warm_lazy: COLD is 1 for the requests of the execute that paid the
1 s lazy initialization, 0 afterwards. Every execute logs the shape and
sum of each request's INPUT0 ("warm_lazy: request 1 of 2: shape [1, 2]
sum 0.0")."""

import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.initialized = False

    def execute(self, requests):
        cold = 0
        if not self.initialized:
            time.sleep(1.0)
            self.initialized = True
            cold = 1
        responses = []
        for i, request in enumerate(requests):
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            pb_utils.Logger.log_info("warm_lazy: request {} of {}: shape {} sum {}".format(
                i + 1, len(requests), list(x.shape), float(x.sum())))
            out = np.full((x.shape[0], 1), cold, dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("COLD", out)]))
        return responses
