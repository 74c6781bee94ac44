"""error_codes: answers each request with the TritonError it asks for.

The code is named by the input CODE (a one-element string) or by the
request parameter "error_code"; the message is "error_codes: <NAME>".
Each request gets its own response, so one batch can mix codes.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

CODES = {
    "UNKNOWN": pb_utils.TritonError.UNKNOWN,
    "INTERNAL": pb_utils.TritonError.INTERNAL,
    "NOT_FOUND": pb_utils.TritonError.NOT_FOUND,
    "INVALID_ARG": pb_utils.TritonError.INVALID_ARG,
    "UNAVAILABLE": pb_utils.TritonError.UNAVAILABLE,
    "UNSUPPORTED": pb_utils.TritonError.UNSUPPORTED,
    "ALREADY_EXISTS": pb_utils.TritonError.ALREADY_EXISTS,
    "CANCELLED": pb_utils.TritonError.CANCELLED,
}


def requested_code(request):
    code = pb_utils.get_input_tensor_by_name(request, "CODE")
    if code is not None:
        value = code.as_numpy().reshape(-1)[0]
        return value.decode("utf-8") if isinstance(value, bytes) else str(value)
    return json.loads(request.parameters()).get("error_code", "OK")


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            name = requested_code(request)
            if name == "OK":
                data = pb_utils.get_input_tensor_by_name(request, "INPUT0")
                array = data.as_numpy() if data is not None else np.zeros(0, np.float32)
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", array)]))
            elif name in CODES:
                responses.append(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError("error_codes: " + name, CODES[name]))
                )
            else:
                responses.append(
                    pb_utils.InferenceResponse(
                        error=pb_utils.TritonError(
                            "error_codes: unknown code name '%s'" % name, pb_utils.TritonError.INVALID_ARG
                        )
                    )
                )
        return responses
