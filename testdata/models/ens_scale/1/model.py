"""ens_scale: OUTPUT0 = 2 * INPUT0 (the preprocess step of the example ensembles).

The request parameter "scale_error", when true, fails the request, so an
ensemble test can check that a step's error reaches the client.
"""

import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            if json.loads(request.parameters()).get("scale_error", False):
                responses.append(
                    pb_utils.InferenceResponse(
                        error=pb_utils.TritonError("ens_scale: failing on request", pb_utils.TritonError.INVALID_ARG)
                    )
                )
                continue
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x * 2)]))
        return responses
