"""batch_slow: sleeps DELAY_MS milliseconds per request, then echoes it.
It keeps its one stub busy so that requests queue in the dynamic batcher."""

import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            delay = pb_utils.get_input_tensor_by_name(request, "DELAY_MS").as_numpy()
            time.sleep(float(delay.sum()) / 1000.0)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", delay)]))
        return responses
