# A model that starts a helper process in a session of its own, as a model
# that launches a daemon does. The helper outlives its stub: it leaves the
# stub's process group, so it is not killed with it, and it exits only once
# the stub is gone, when it has been re-parented to the container's init.
import os
import subprocess
import sys

import triton_python_backend_utils as pb_utils

HELPER = """
import os, sys, time
stub = int(sys.argv[1])
while os.getppid() == stub:
    time.sleep(0.05)
time.sleep(0.2)
"""


class TritonPythonModel:
    def initialize(self, args):
        self.helper = subprocess.Popen(
            [sys.executable, "-c", HELPER, str(os.getpid()), "orphan-helper-of-stubvisor-test"],
            start_new_session=True,
        )

    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return out
