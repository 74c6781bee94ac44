"""bls_fork: forks a child (multiprocessing, fork start method) that calls
add_sub with BLS, then calls add_sub itself. CHILD holds "ok <sum>" when the
child's call worked, or "error <exception text>"; PARENT is OUTPUT0 of the
stub's own call (INPUT0 + INPUT0). The child also logs a line, which must
not reach the stub's rings either."""

import multiprocessing

import numpy as np
import triton_python_backend_utils as pb_utils


def add_sub(x):
    request = pb_utils.InferenceRequest(
        model_name="add_sub",
        inputs=[pb_utils.Tensor("INPUT0", x), pb_utils.Tensor("INPUT1", x)],
        requested_output_names=["OUTPUT0"],
    )
    response = request.exec()
    if response.has_error():
        raise pb_utils.TritonModelException(response.error().message())
    return pb_utils.get_output_tensor_by_name(response, "OUTPUT0").as_numpy()


def in_child(x):
    pb_utils.Logger.log_info("bls_fork: child running")
    try:
        return "ok {}".format(float(add_sub(x).sum()))
    except Exception as exc:  # the text goes back to the parent
        return "error {}: {}".format(type(exc).__name__, exc)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        ctx = multiprocessing.get_context("fork")
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            with ctx.Pool(1) as pool:
                child = pool.apply(in_child, (x,))
            parent = add_sub(x)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("CHILD", np.array([child.encode()], dtype=np.object_)),
                pb_utils.Tensor("PARENT", parent),
            ]))
        return responses
