"""bls_trace: calls add_sub through BLS with trace=request.trace(), so the
call joins the request's trace, and returns add_sub's OUTPUT0 with TRACE,
the trace context the model saw (request.trace().get_context(), "" when
the request is not traced)."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            call = pb_utils.InferenceRequest(
                model_name="add_sub",
                model_version=1,
                inputs=[pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                        pb_utils.get_input_tensor_by_name(request, "INPUT1")],
                requested_output_names=["OUTPUT0"],
                trace=request.trace(),
            )
            response = call.exec()
            if response.has_error():
                raise pb_utils.TritonModelException(response.error().message())
            out = pb_utils.get_output_tensor_by_name(response, "OUTPUT0")
            context = request.trace().get_context() or ""
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", out.as_numpy()),
                pb_utils.Tensor("TRACE", np.array([context.encode()], dtype=np.object_)),
            ]))
        return responses
