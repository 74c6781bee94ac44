"""repeat_decoupled: the decoupled "repeat" example.

For a request with IN of n elements the model sends n responses from a
separate thread: the i'th carries OUT = IN[i] and IDX = i, sent DELAY[i]
milliseconds after the previous one; then it closes the stream with a
final flag. execute itself returns after WAIT milliseconds, so responses
of several requests may interleave. An empty IN yields no response, only
the final flag.
"""

import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = model_config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(model_config):
            raise pb_utils.TritonModelException(
                "the model `{}` can generate any number of responses per request, enable "
                "decoupled transaction policy in model configuration to serve this model".format(args["model_name"])
            )
        out_config = pb_utils.get_output_config_by_name(model_config, "OUT")
        idx_config = pb_utils.get_output_config_by_name(model_config, "IDX")
        self.out_dtype = pb_utils.triton_string_to_numpy(out_config["data_type"])
        self.idx_dtype = pb_utils.triton_string_to_numpy(idx_config["data_type"])
        self.inflight = 0
        self.inflight_cv = threading.Condition()

    def execute(self, requests):
        for request in requests:
            in_input = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            delay_input = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy()
            if in_input.shape != delay_input.shape:
                request.get_response_sender().send(
                    pb_utils.InferenceResponse(
                        error=pb_utils.TritonError(
                            "expected IN and DELAY shape to match, got {} and {}".format(
                                list(in_input.shape), list(delay_input.shape)
                            ),
                            pb_utils.TritonError.INVALID_ARG,
                        )
                    ),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
                continue
            thread = threading.Thread(
                target=self.response_thread,
                args=(request.get_response_sender(), in_input, delay_input),
                daemon=True,
            )
            with self.inflight_cv:
                self.inflight += 1
            thread.start()

        wait_input = pb_utils.get_input_tensor_by_name(requests[0], "WAIT")
        if wait_input is not None:
            time.sleep(int(wait_input.as_numpy()[0]) / 1000)
        return None

    def response_thread(self, response_sender, in_input, delay_input):
        try:
            for idx in range(in_input.size):
                time.sleep(int(delay_input[idx]) / 1000)
                idx_output = pb_utils.Tensor("IDX", np.array([idx], self.idx_dtype))
                out_output = pb_utils.Tensor("OUT", np.array([in_input[idx]], self.out_dtype))
                response_sender.send(pb_utils.InferenceResponse(output_tensors=[idx_output, out_output]))
            response_sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        finally:
            with self.inflight_cv:
                self.inflight -= 1
                self.inflight_cv.notify_all()

    def finalize(self):
        # Let the response threads finish (bounded: a model must not hold
        # the unload forever).
        with self.inflight_cv:
            self.inflight_cv.wait_for(lambda: self.inflight == 0, timeout=10)
