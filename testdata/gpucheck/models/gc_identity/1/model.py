"""gc_identity: OUTPUT0 = INPUT0; ON_GPU says whether the input arrived on
the GPU. A GPU input goes back out through DLPack."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            on_gpu = not x.is_cpu()
            if on_gpu:
                out = pb_utils.Tensor.from_dlpack("OUTPUT0", x.to_dlpack())
            else:
                out = pb_utils.Tensor("OUTPUT0", x.as_numpy())
            flag = pb_utils.Tensor("ON_GPU", np.array([int(on_gpu)], dtype=np.int32))
            responses.append(pb_utils.InferenceResponse([out, flag]))
        return responses
