"""bls_await_decoupled: `async def execute` that awaits
async_exec(decoupled=True) to meet_decoupled for each request and relays
every response of the stream, as python_backend's async_execute_decouple_bls
QA model does. The awaits of requests that arrive one by one on the same
instance overlap only if waiting for the callee never blocks the event
loop: then meet_decoupled sees them all (MET = PARTIES).
"""

import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def relay(self, request):
        call = pb_utils.InferenceRequest(
            model_name="meet_decoupled",
            inputs=[pb_utils.get_input_tensor_by_name(request, "PARTIES")],
            requested_output_names=["MET"],
        )
        sender = request.get_response_sender()
        for response in await call.async_exec(decoupled=True):
            if response.has_error():
                sender.send(pb_utils.InferenceResponse(error=response.error()))
                continue
            met = pb_utils.get_output_tensor_by_name(response, "MET")
            if met is not None:
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("MET", met.as_numpy())]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    async def execute(self, requests):
        await asyncio.gather(*(self.relay(r) for r in requests))
        return None
