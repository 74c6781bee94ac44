"""batch_order: answers each request with the IDX of the request before it
in the same execute call (-1 for the first) and the number of requests in
that call, so a client can check that a batch kept its arrival order."""

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        prev = -1
        for request in requests:
            idx = pb_utils.get_input_tensor_by_name(request, "IDX").as_numpy()
            rows = idx.shape[0]
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("PREV", np.full((rows, 1), prev, dtype=np.int32)),
                pb_utils.Tensor("COUNT", np.full((rows, 1), len(requests), dtype=np.int32)),
            ]))
            prev = int(idx.reshape(-1)[-1])
        return responses
