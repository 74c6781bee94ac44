"""log_later: echoes IN, then logs "log_later: after <IN>" from a timer
thread 50 ms later, when nobody waits for anything from the stub."""

import threading

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            n = int(value[0])
            threading.Timer(0.05, pb_utils.Logger.log_info, args=("log_later: after %d" % n,)).start()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]))
        return responses
