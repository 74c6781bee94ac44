"""bls_chain_async_decoupled: bls_chain_async as a decoupled model.

execute starts one chain per request on the stub's event loop and returns
None at once (a decoupled async execute does not hold the instance), so
the chains of later requests run beside the earlier ones. Each chain runs
INPUT0 through the models named by the STEPS parameter, each step an
awaited async_exec, and sends its one response with the FINAL flag
through the request's response sender. A step's error is that response.
"""

import asyncio
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.steps = config["parameters"]["STEPS"]["string_value"].split(",")

    async def chain(self, request):
        sender = request.get_response_sender()
        array = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
        for name in self.steps:
            result = await pb_utils.InferenceRequest(
                model_name=name,
                requested_output_names=["OUTPUT0"],
                inputs=[pb_utils.Tensor("INPUT0", array)],
            ).async_exec()
            if result.has_error():
                sender.send(pb_utils.InferenceResponse(error=result.error()),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return
            array = pb_utils.get_output_tensor_by_name(result, "OUTPUT0").as_numpy()
        sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", array)]),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    async def execute(self, requests):
        await asyncio.gather(*(self.chain(r) for r in requests))
        return None
