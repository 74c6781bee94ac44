"""gc_two: answers "<instance name> <device id> <CUDA_VISIBLE_DEVICES>"
after a short pause, so concurrent requests spread over both instances."""

import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.who = "%s %s %s" % (args["model_instance_name"], args["model_instance_device_id"],
                                 os.environ.get("CUDA_VISIBLE_DEVICES", "-"))

    def execute(self, requests):
        time.sleep(0.05)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("WHO", np.array([self.who.encode()], dtype=np.object_))])
                for _ in requests]
