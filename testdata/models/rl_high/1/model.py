"""rl_high: the rate limiter's end-to-end model; the test derives rl_low
and rl_hold from it by their configs.

Each execute appends one line, "<model> <start_ns> <end_ns>" (monotonic
clock, shared by all processes), to rl_log.txt in the model repository, in
one O_APPEND write, so the lines of different stubs never mix. With the
parameter BLOCK_FIFO, execute first reads that FIFO of the repository to
its end: it holds its resources until the test closes the FIFO's write end.
"""

import json
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_name"]
        repo = os.path.dirname(args["model_repository"])
        self.log = os.path.join(repo, "rl_log.txt")
        params = json.loads(args["model_config"]).get("parameters", {})
        fifo = params.get("BLOCK_FIFO", {}).get("string_value", "")
        self.fifo = os.path.join(repo, fifo) if fifo else ""

    def execute(self, requests):
        start = time.monotonic_ns()
        if self.fifo:
            with open(self.fifo, "rb") as f:
                f.read()
        end = time.monotonic_ns()
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{self.name} {start} {end}\n".encode())
        finally:
            os.close(fd)
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]
            )
            for r in requests
        ]
