"""cancel_watch: a model that notices cancellation.

execute polls request.is_cancelled() (decoupled: the response sender's
is_cancelled()) every 10 ms for at most WAIT_MS milliseconds. When it sees
the cancellation it logs "cancel_watch: request '<id>' cancelled" and
answers with a CANCELLED error, as Triton's execute_cancel test model does;
otherwise it answers TICKS, the number of polls. Decoupled, it also sends
one response per poll (TICKS = 1, 2, ...), so a stream shows it running.
"""

import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        import json

        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"]))

    def execute(self, requests):
        responses = []
        for request in requests:
            wait_ms = int(pb_utils.get_input_tensor_by_name(request, "WAIT_MS").as_numpy()[0])
            sender = request.get_response_sender() if self.decoupled else None
            watched = sender if sender is not None else request
            pb_utils.Logger.log_info("cancel_watch: request '%s' running" % request.request_id())
            ticks = 0
            cancelled = False
            deadline = time.monotonic() + wait_ms / 1000
            while time.monotonic() < deadline:
                if watched.is_cancelled():
                    cancelled = True
                    break
                time.sleep(0.01)
                ticks += 1
                if sender is not None:
                    sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("TICKS", np.array([ticks], np.int32))]))
            if cancelled:
                pb_utils.Logger.log_info("cancel_watch: request '%s' cancelled" % request.request_id())
                response = pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("request cancelled", pb_utils.TritonError.CANCELLED))
            else:
                response = pb_utils.InferenceResponse([pb_utils.Tensor("TICKS", np.array([ticks], np.int32))])
            if sender is not None:
                if cancelled:
                    sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                else:
                    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                responses.append(response)
        return None if self.decoupled else responses
