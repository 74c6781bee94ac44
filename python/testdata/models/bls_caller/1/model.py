"""bls_caller: calls the model "add_sub" (or "repeat" when decoupled)
through BLS and returns what came back, by request parameter "mode":
sync, decoupled, async, error, async_executor (an async_exec call open
while an executor's result comes back to the loop), own_loop (async_exec
on a loop of the model's own)."""

import asyncio
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        mode = json.loads(requests[0].parameters()).get("mode", "sync")
        if mode == "async":
            return self.run_async(requests)
        if mode == "async_executor":
            return self.run_async_executor(requests[0])
        return [getattr(self, "mode_" + mode)(r) for r in requests]

    def bls_request(self, request, outputs):
        return pb_utils.InferenceRequest(
            model_name="add_sub",
            inputs=[pb_utils.get_input_tensor_by_name(request, "INPUT0"), pb_utils.get_input_tensor_by_name(request, "INPUT1")],
            requested_output_names=outputs,
            parameters={"origin": "bls_caller"},
        )

    def mode_sync(self, request):
        response = self.bls_request(request, ["OUTPUT0"]).exec()
        if response.has_error():
            raise pb_utils.TritonModelException(response.error().message())
        out = pb_utils.get_output_tensor_by_name(response, "OUTPUT0")
        return pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out.as_numpy() * 10)])

    def mode_error(self, request):
        response = self.bls_request(request, ["OUTPUT0"]).exec()
        return pb_utils.InferenceResponse(error=response.error())

    def mode_decoupled(self, request):
        bls = pb_utils.InferenceRequest(
            model_name="repeat",
            inputs=[pb_utils.get_input_tensor_by_name(request, "INPUT0")],
            requested_output_names=["OUT"],
        )
        values = []
        for response in bls.exec(decoupled=True):
            if response.has_error():
                raise pb_utils.TritonModelException(response.error().message())
            out = pb_utils.get_output_tensor_by_name(response, "OUT")
            if out is not None:
                values.append(float(out.as_numpy()[0]))
        return pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.array(values, dtype=np.float32))])

    async def run_async(self, requests):
        responses = []
        for request in requests:
            response = await self.bls_request(request, ["OUTPUT1"]).async_exec()
            out = pb_utils.get_output_tensor_by_name(response, "OUTPUT1")
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out.as_numpy())]))
        return responses

    async def run_async_executor(self, request):
        # The second call is sent only once the executor's result reached
        # the loop, while the first call is still open.
        loop = asyncio.get_running_loop()
        first = asyncio.ensure_future(self.bls_request(request, ["OUTPUT1"]).async_exec())
        factor = await loop.run_in_executor(None, lambda: 3)
        second = await self.bls_request(request, ["OUTPUT0"]).async_exec()
        first = await first
        out0 = pb_utils.get_output_tensor_by_name(second, "OUTPUT0").as_numpy()
        out1 = pb_utils.get_output_tensor_by_name(first, "OUTPUT1").as_numpy()
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out0 * factor + out1)])]

    def mode_own_loop(self, request):
        async def call():
            return await self.bls_request(request, ["OUTPUT1"]).async_exec()

        loop = asyncio.new_event_loop()
        try:
            response = loop.run_until_complete(call())
        finally:
            loop.close()
        out = pb_utils.get_output_tensor_by_name(response, "OUTPUT1")
        return pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out.as_numpy())])
