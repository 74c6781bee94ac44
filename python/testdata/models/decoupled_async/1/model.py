"""decoupled_async: a decoupled model with an async execute. Each request
gets COUNT responses (OUT = index) sent from the event loop, then FINAL;
COUNT < 0 makes the coroutine raise after execute has returned."""

import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            sender = request.get_response_sender()
            if count < 0:
                await asyncio.sleep(0)
                raise ValueError("decoupled_async: negative count")
            for i in range(count):
                await asyncio.sleep(0.001)
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
