"""identity_all: every input INPUT_<TYPE> comes back as OUTPUT_<TYPE>.

All inputs are optional, so a request may carry any subset of the data
types. BF16 has no numpy type: it is passed through DLPack, the way
Triton models handle it.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for tensor in request.inputs():
                name = "OUTPUT_" + tensor.name()[len("INPUT_"):]
                if tensor.name() == "INPUT_BF16":
                    outputs.append(pb_utils.Tensor.from_dlpack(name, tensor))
                    continue
                array = tensor.as_numpy()
                if tensor.name() == "INPUT_STRING":
                    # BYTES inputs arrive as object arrays of bytes.
                    assert array.dtype == np.object_, array.dtype
                outputs.append(pb_utils.Tensor(name, array))
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
