"""gc_bls: sends its input, a GPU tensor when it came in a CUDA region, to
gc_identity through BLS; with torch, also a torch CUDA tensor (1 + input)
through DLPack, checking what comes back. OUTPUT0 is the first answer;
TORCH says whether the torch leg ran."""

import numpy as np
import triton_python_backend_utils as pb_utils

try:
    import torch
    import torch.utils.dlpack
except ImportError:
    torch = None


def _call(tensor):
    req = pb_utils.InferenceRequest(model_name="gc_identity", requested_output_names=["OUTPUT0"], inputs=[tensor])
    resp = req.exec()
    if resp.has_error():
        raise pb_utils.TritonModelException("BLS: " + resp.error().message())
    return pb_utils.get_output_tensor_by_name(resp, "OUTPUT0")


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            if x.is_cpu():
                raise pb_utils.TritonModelException("INPUT0 arrived on the CPU; send it in a CUDA region")
            out = _call(x)
            used_torch = 0
            if torch is not None and torch.cuda.is_available():
                t = torch.utils.dlpack.from_dlpack(x.to_dlpack()) + 1
                back = _call(pb_utils.Tensor.from_dlpack("INPUT0", torch.utils.dlpack.to_dlpack(t)))
                want = t.cpu().numpy()
                got = back.as_numpy() if back.is_cpu() else torch.utils.dlpack.from_dlpack(back.to_dlpack()).cpu().numpy()
                if not np.array_equal(got, want):
                    raise pb_utils.TritonModelException("BLS with a torch CUDA tensor answered other values")
                used_torch = 1
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", out.as_numpy() if out.is_cpu() else np.empty(0, np.float32)),
                pb_utils.Tensor("TORCH", np.array([used_torch], dtype=np.int32))]))
        return responses
