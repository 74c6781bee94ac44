"""batch_count: answers each request with its IDX and the number of
requests its execute call received; an IDX ending in 7 is refused with an
error response. Each call takes 5 ms, so that requests queue behind it."""

import time

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.005)
        count = np.array([len(requests)], dtype=np.int32)
        responses = []
        for request in requests:
            idx = pb_utils.get_input_tensor_by_name(request, "IDX").as_numpy()
            if int(idx[0]) % 10 == 7:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("request %d refused" % int(idx[0]))))
                continue
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("IDX_OUT", idx.astype(np.int32)),
                pb_utils.Tensor("COUNT", count),
            ]))
        return responses
