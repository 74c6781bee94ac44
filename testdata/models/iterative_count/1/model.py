"""iterative_count: counts down from IN, one step per execute, by
rescheduling the request until nothing is left (request rescheduling with
sequence_batching { iterative_sequence: true }). A decoupled model sends
every step; otherwise only the last step answers."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.left = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            cid = request.correlation_id()
            if not cid:
                # A not-ready request filling an empty batch slot (the
                # direct strategy keeps batch position = slot).
                if not self.decoupled:
                    responses.append(pb_utils.InferenceResponse([]))
                continue
            if request.flags() & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START:
                self.left[cid] = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().reshape(-1)[0])
            self.left[cid] -= 1
            left = self.left[cid]
            response = pb_utils.InferenceResponse([
                pb_utils.Tensor("LEFT", np.array([[left]], dtype=np.int32)),
                pb_utils.Tensor("CORRID", np.array([[cid]], dtype=np.uint64)),
            ])
            if left > 0:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
            else:
                del self.left[cid]
            if self.decoupled:
                flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if left <= 0 else 0
                request.get_response_sender().send(response, flags=flags)
            else:
                responses.append(response if left <= 0 else None)
        return None if self.decoupled else responses
