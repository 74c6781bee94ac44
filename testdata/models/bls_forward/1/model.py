"""bls_forward: calls another model with BLS and returns what it answered.

The callee's name comes from the MODEL_NAME tensor and is passed to
InferenceRequest as the bytes it holds, with the default model_version,
as python_backend's BLS example does. INPUT0/INPUT1 are forwarded when
present. Request parameters: "timeout_us" (the BLS request's timeout),
"add_batch_dim" (forward inputs with a leading batch dimension of 1 and
drop it from the outputs). The callee's outputs, response parameters and
errors (text and code) come back unchanged.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


def forward(request):
    """Build the BLS request for one incoming request."""
    params = json.loads(request.parameters())
    batch = bool(params.get("add_batch_dim", False))
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        t = pb_utils.get_input_tensor_by_name(request, name)
        if t is not None:
            array = t.as_numpy()
            inputs.append(pb_utils.Tensor(name, array[np.newaxis] if batch else array))
    model_name = pb_utils.get_input_tensor_by_name(request, "MODEL_NAME").as_numpy()[0]
    bls = pb_utils.InferenceRequest(
        model_name=model_name,
        inputs=inputs,
        requested_output_names=[],
        timeout=int(params.get("timeout_us", 0)),
    )
    return bls, batch


def answer(response, batch):
    """The reply to the incoming request from the callee's response."""
    if response.has_error():
        error = response.error()
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(error.message(), error.code()))
    outputs = []
    for t in response.output_tensors():
        if t.name() in ("OUTPUT0", "OUTPUT1"):
            array = t.as_numpy()
            outputs.append(pb_utils.Tensor(t.name(), array[0] if batch else array))
    return pb_utils.InferenceResponse(outputs, parameters=json.loads(response.parameters()))


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            bls, batch = forward(request)
            responses.append(answer(bls.exec(), batch))
        return responses
