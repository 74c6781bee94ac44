"""leak: every request keeps LEAK_MB more MiB alive; HELD_MB answers the
total this stub holds. The memory is written, so it is resident."""

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.held = []

    def execute(self, requests):
        responses = []
        for request in requests:
            mb = int(pb_utils.get_input_tensor_by_name(request, "LEAK_MB").as_numpy()[0])
            if mb > 0:
                self.held.append(b"\x01" * (mb << 20))
            held = np.array([len(self.held) and sum(len(b) for b in self.held) >> 20], dtype=np.int32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("HELD_MB", held)]))
        return responses
