"""model_control: pb_utils.load_model, unload_model and is_model_ready
from a model.

initialize loads the model named by the LOAD_AT_INIT parameter (a model
loading another while it is itself being loaded). Each request names an
operation in its parameters: "op" is "load", "unload" or "is_ready",
"model" the model, and optionally "version" (is_ready), "config" (a model
config JSON) and "file:<version>/<name>" keys whose string values are file
contents (load). RESULT is what is_model_ready returned (true for the
others); a failure is the response's error.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"]).get("parameters", {})
        name = params.get("LOAD_AT_INIT", {}).get("string_value", "")
        if name:
            pb_utils.load_model(name)

    def execute(self, requests):
        responses = []
        for request in requests:
            params = json.loads(request.parameters())
            try:
                result = self.run(params)
            except pb_utils.TritonModelException as exc:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(exc.message())))
                continue
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("RESULT", np.array([result], np.bool_))]))
        return responses

    def run(self, params):
        op, model = params["op"], params["model"]
        if op == "is_ready":
            return pb_utils.is_model_ready(model, params.get("version", ""))
        if op == "unload":
            pb_utils.unload_model(model)
            return True
        files = {k: v.encode() for k, v in params.items() if k.startswith("file:")}
        pb_utils.load_model(model, config=params.get("config", ""), files=files)
        return True
