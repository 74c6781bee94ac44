"""ens_offset: OUTPUT0 = INPUT0 + 1 (the postprocess step of the example ensembles)."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() + 1)]
            )
            for r in requests
        ]
