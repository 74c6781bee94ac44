"""seq_string: seq_accumulate's model, under string correlation ids.

Its state lives in the stub process, keyed by correlation id, and starts
over on the START control. Each response carries the sum so far and, in
SEEN, a JSON record of everything the request looked like from inside the
model: the control inputs the sequence batcher added, the flags and
correlation id, the instance, the size of the execute call, the request's
place in it and how many of its requests were not-ready fillers. Tests use
it to check routing, order and control values.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


def _scalar(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0]


class TritonPythonModel:
    def initialize(self, args):
        self.instance = args["model_instance_name"]
        self.state = {}

    def execute(self, requests):
        responses = []
        not_ready = sum(1 for r in requests if not _scalar(r, "READY"))
        for slot, request in enumerate(requests):
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            start, end, ready = _scalar(request, "START"), _scalar(request, "END"), _scalar(request, "READY")
            corrid = _scalar(request, "CORRID")
            corrid = corrid.decode() if isinstance(corrid, bytes) else int(corrid)
            key = request.correlation_id()
            if start:
                self.state[key] = {"n": 0, "sum": 0}
            state = self.state.setdefault(key, {"n": 0, "sum": 0, "unstarted": True})
            state["n"] += 1
            state["sum"] += int(value.reshape(-1)[0])
            seen = {
                "instance": self.instance,
                "start": float(start),
                "end": float(end),
                "ready": bool(ready),
                "corrid": corrid,
                "correlation_id": key,
                "flags": request.flags(),
                "n": state["n"],
                "sum": state["sum"],
                "unstarted": state.get("unstarted", False),
                "batch": len(requests),
                "slot": slot,
                "not_ready": not_ready,
            }
            if end:
                del self.state[key]
            total = np.full(value.shape, state["sum"], dtype=np.int32)
            text = np.full(value.shape, json.dumps(seen).encode(), dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", total), pb_utils.Tensor("SEEN", text)]))
        return responses
