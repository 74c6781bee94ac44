"""ens_int_scale: OUT = 10 * IN and IDX_OUT = IDX (the step after the decoupled one in ens_stream)."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            idx = pb_utils.get_input_tensor_by_name(r, "IDX").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x * 10), pb_utils.Tensor("IDX_OUT", idx)]))
        return out
