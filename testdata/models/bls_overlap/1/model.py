"""bls_overlap: two BLS calls of one request in flight together.

A thread calls identity_timeout, which sleeps for the request parameter
"sleep_ms" (SLEEP_MS); once that thread is about to call, execute calls
add_sub. FAST_FIRST is 1 when add_sub's answer came while the slow call
was still running, 0 when it came after it (the server took the second
call only once the first had ended).
"""

import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            sleep_ms = int(pb_utils.get_input_tensor_by_name(request, "SLEEP_MS").as_numpy()[0])
            starting = threading.Event()
            slow = {}

            def call_slow():
                starting.set()
                slow["response"] = pb_utils.InferenceRequest(
                    model_name="identity_timeout",
                    requested_output_names=["OUTPUT0"],
                    inputs=[pb_utils.Tensor("INPUT0", np.zeros((1, 1), np.float32))],
                    parameters={"sleep_ms": sleep_ms},
                ).exec()

            thread = threading.Thread(target=call_slow)
            thread.start()
            starting.wait()
            fast = pb_utils.InferenceRequest(
                model_name="add_sub",
                requested_output_names=["OUTPUT0"],
                inputs=[pb_utils.Tensor("INPUT0", np.ones(4, np.float32)),
                        pb_utils.Tensor("INPUT1", np.ones(4, np.float32))],
            ).exec()
            fast_first = thread.is_alive()
            thread.join()
            for response in (fast, slow["response"]):
                if response.has_error():
                    raise pb_utils.TritonModelException(response.error().message())
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("FAST_FIRST", np.array([int(fast_first)], np.int32))]))
        return responses
