"""bls_chain: INPUT0 through the models named by the STEPS parameter, by BLS.

Each model gets the previous one's OUTPUT0 as its INPUT0; the last
OUTPUT0 is the answer. A step's error fails the request with its message.
"""

import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.steps = config["parameters"]["STEPS"]["string_value"].split(",")

    def execute(self, requests):
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            error = None
            for name in self.steps:
                result = pb_utils.InferenceRequest(
                    model_name=name,
                    requested_output_names=["OUTPUT0"],
                    inputs=[pb_utils.Tensor("INPUT0", tensor.as_numpy())],
                ).exec()
                if result.has_error():
                    error = result.error()
                    break
                tensor = pb_utils.get_output_tensor_by_name(result, "OUTPUT0")
            if error is not None:
                responses.append(pb_utils.InferenceResponse(error=error))
            else:
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", tensor.as_numpy())]))
        return responses
