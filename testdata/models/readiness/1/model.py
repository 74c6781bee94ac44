"""readiness: a model whose is_ready() says what its requests told it.

A request's parameters set how the next is_ready() calls behave: "ready"
(bool) is what they return, "raise" (bool) makes them raise, "sleep_ms"
makes them take that long. READY echoes the "ready" setting; CHECKING
says whether an is_ready() call was running while execute ran (the stub
runs is_ready() beside execute, as Triton does).
"""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.ready, self.raise_, self.sleep_ms = True, False, 0
        self.checking = False

    def execute(self, requests):
        responses = []
        for request in requests:
            params = json.loads(request.parameters())
            self.ready = bool(params.get("ready", self.ready))
            self.raise_ = bool(params.get("raise", self.raise_))
            self.sleep_ms = int(params.get("sleep_ms", self.sleep_ms))
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("READY", np.array([self.ready], np.bool_)),
                pb_utils.Tensor("CHECKING", np.array([self.checking], np.bool_)),
            ]))
        return responses

    def is_ready(self):
        if self.sleep_ms:
            self.checking = True
            time.sleep(self.sleep_ms / 1000)
            self.checking = False
        if self.raise_:
            raise RuntimeError("readiness check failed")
        return self.ready
