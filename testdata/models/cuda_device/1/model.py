"""cuda_device: OUTPUT0 = 2 * INPUT0, read from the GPU through DLPack.

A test model for CUDA shared memory with FORCE_CPU_ONLY_INPUT_TENSORS "no":
an input in a client's CUDA region arrives on the device. The model checks
that (is_cpu() is False, as_numpy() refuses, the DLPack capsule names a
kDLCUDA device) and, having no GPU framework, copies the bytes the capsule
points at to the host with the CUDA driver the stub itself uses. An input
sent in the request body arrives on the CPU and is doubled the same way.
"""

import numpy as np
import triton_python_backend_utils as pb_utils

from stubvisor import cuda

_kDLCUDA = 2


def _device_array(tensor):
    if tensor.is_cpu():
        return tensor.as_numpy()
    try:
        tensor.as_numpy()
    except pb_utils.TritonModelException:
        pass
    else:
        raise pb_utils.TritonModelException("as_numpy() worked on a GPU tensor")
    capsule = tensor.to_dlpack()
    address = pb_utils._capsule_get_pointer(capsule, b"dltensor")
    dl = pb_utils._DLManagedTensor.from_address(address).dl_tensor
    if dl.device.device_type != _kDLCUDA or tensor.__dlpack_device__() != (_kDLCUDA, dl.device.device_id):
        raise pb_utils.TritonModelException("DLPack device %d, want kDLCUDA" % dl.device.device_type)
    count = 1
    for i in range(dl.ndim):
        count *= dl.shape[i]
    out = np.empty(count, dtype=np.float32)
    cuda.driver().to_host(dl.device.device_id, out.ctypes.data, dl.data, out.nbytes)
    return out.reshape(tensor.shape())


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = _device_array(pb_utils.get_input_tensor_by_name(request, "INPUT0"))
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x * 2)]))
        return responses
