"""bls_chain_async: bls_chain from an `async def execute`.

Each request of the batch (batch size 1) runs INPUT0, without its batch
dimension, through the models named by the STEPS parameter, each step an
awaited async_exec; the chains of all requests of the batch run at once
(asyncio.gather). A step's error fails its request with the message.
"""

import asyncio
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.steps = config["parameters"]["STEPS"]["string_value"].split(",")

    async def chain(self, request):
        array = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()[0]
        for name in self.steps:
            result = await pb_utils.InferenceRequest(
                model_name=name,
                requested_output_names=["OUTPUT0"],
                inputs=[pb_utils.Tensor("INPUT0", array)],
            ).async_exec()
            if result.has_error():
                return pb_utils.InferenceResponse(error=result.error())
            array = pb_utils.get_output_tensor_by_name(result, "OUTPUT0").as_numpy()
        return pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", array[np.newaxis])])

    async def execute(self, requests):
        return list(await asyncio.gather(*(self.chain(r) for r in requests)))
