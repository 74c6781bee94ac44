"""ens_join: SUM = A + B (joins the two branches of ens_diamond)."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            a = pb_utils.get_input_tensor_by_name(r, "A").as_numpy()
            b = pb_utils.get_input_tensor_by_name(r, "B").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", a + b)]))
        return out
