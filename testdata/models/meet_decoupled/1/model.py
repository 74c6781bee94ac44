"""meet_decoupled: every execution waits, on the stub's event loop, until
PARTIES executions are running at once (or 10 s have passed), then sends
one final response: MET = the most executions it saw running together.

Executions only meet when the server hands them to the instance while
the earlier ones still wait, so MET = PARTIES shows that they overlap.
"""

import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils

_GIVE_UP_S = 10


class TritonPythonModel:
    def initialize(self, args):
        self.running = 0
        self.most = 0
        self.changed = None  # an asyncio.Condition, made on the loop

    async def execute(self, requests):
        if self.changed is None:
            self.changed = asyncio.Condition()
        for request in requests:
            sender = request.get_response_sender()
            parties = int(pb_utils.get_input_tensor_by_name(request, "PARTIES").as_numpy()[0])
            async with self.changed:
                self.running += 1
                self.most = max(self.most, self.running)
                self.changed.notify_all()
                try:
                    await asyncio.wait_for(self.changed.wait_for(lambda: self.most >= parties), _GIVE_UP_S)
                except asyncio.TimeoutError:
                    pass
                met = self.most
                self.running -= 1
                if self.running == 0:
                    self.most = 0
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("MET", np.array([met], np.int32))]),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
