"""batch_add: OUTPUT0 = INPUT0 + 1, and REQUESTS = how many requests the
execute call that answered held, so a client can see its request was
merged with others by the dynamic batcher."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        n = len(requests)
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            count = np.full((x.shape[0], 1), n, dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x + 1), pb_utils.Tensor("REQUESTS", count)]))
        return responses
