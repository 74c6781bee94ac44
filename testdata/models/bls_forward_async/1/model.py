"""bls_forward_async: bls_forward from an `async def execute`.

Each request of the batch (batch size 1) is forwarded without its batch
dimension to the model MODEL_NAME names; all BLS requests of the batch
are in flight at once (async_exec and asyncio.gather), and each answer
gets the batch dimension back. The requests report how many BLS calls
were in flight together as the response parameter "in_flight".
"""

import asyncio
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        calls = []
        for request in requests:
            inputs = []
            for name in ("INPUT0", "INPUT1"):
                t = pb_utils.get_input_tensor_by_name(request, name)
                if t is not None:
                    inputs.append(pb_utils.Tensor(name, t.as_numpy()[0]))
            model_name = pb_utils.get_input_tensor_by_name(request, "MODEL_NAME").as_numpy()[0][0]
            bls = pb_utils.InferenceRequest(model_name=model_name, inputs=inputs, requested_output_names=[])
            calls.append(bls.async_exec())
        answers = await asyncio.gather(*calls)
        responses = []
        for response in answers:
            if response.has_error():
                error = response.error()
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(error.message(), error.code())))
                continue
            outputs = [pb_utils.Tensor(t.name(), t.as_numpy()[np.newaxis]) for t in response.output_tensors()
                       if t.name() in ("OUTPUT0", "OUTPUT1")]
            responses.append(pb_utils.InferenceResponse(outputs, parameters={"in_flight": len(calls)}))
        return responses
