"""gc_torch_out: OUTPUT0 = 2 * INPUT0 computed by torch on the instance's
GPU and returned as a torch CUDA tensor through DLPack."""

import torch
import torch.utils.dlpack
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.device = torch.device("cuda", int(args["model_instance_device_id"]))

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            if x.is_cpu():
                t = torch.from_numpy(x.as_numpy()).to(self.device)
            else:
                t = torch.utils.dlpack.from_dlpack(x.to_dlpack())
            y = t * 2
            if not y.is_cuda:
                raise pb_utils.TritonModelException("torch computed on %s, want CUDA" % y.device)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor.from_dlpack("OUTPUT0", torch.utils.dlpack.to_dlpack(y))]))
        return responses
