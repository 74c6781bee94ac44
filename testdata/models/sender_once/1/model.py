"""sender_once: a model that is not decoupled answers through the response
sender and returns None, as Triton allows. The request parameter "mode"
says when: "during" (inside execute), "after" (from a thread, once execute
has returned) or "drop" (never: the sender is dropped unused). OUT is 1.
"""

import json
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


def answer(sender, returned):
    returned.wait(10)
    sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([1], np.int32))]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


class TritonPythonModel:
    def execute(self, requests):
        returned = threading.Event()
        for request in requests:
            mode = json.loads(request.parameters()).get("mode", "during")
            sender = request.get_response_sender()
            if mode == "during":
                returned.set()
                answer(sender, returned)
            elif mode == "after":
                threading.Thread(target=answer, args=(sender, returned), daemon=True).start()
            del sender  # "drop": the last reference goes with execute
        returned.set()
        return None
