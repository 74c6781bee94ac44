"""bls_stream: decoupled BLS, streamed.

CANCEL_AFTER = 0: calls repeat_decoupled with exec(decoupled=True) and
sends one response (OUT) per response of the stream, as it arrives.
CANCEL_AFTER = n > 0: calls cancel_watch_stream (a decoupled cancel_watch,
which streams TICKS until cancelled) instead, forwards its ticks as OUT,
and calls ResponseIterator.cancel() after n of them; the stream goes on
until the callee ends it.
Either way the last response carries CANCELLED: whether the callee's
stream ended with a CANCELLED error. Without CANCEL_AFTER, a second loop
over the ended stream must replay all of it (outputs plus the bare final).
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            self.stream(request)
        return None

    def stream(self, request):
        sender = request.get_response_sender()
        values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
        cancel_after = int(pb_utils.get_input_tensor_by_name(request, "CANCEL_AFTER").as_numpy()[0])
        if cancel_after > 0:
            bls = pb_utils.InferenceRequest(
                model_name="cancel_watch_stream",
                inputs=[pb_utils.Tensor("WAIT_MS", np.array([30000], np.uint32))],
                requested_output_names=["TICKS"],
            )
        else:
            bls = pb_utils.InferenceRequest(
                model_name="repeat_decoupled",
                inputs=[
                    pb_utils.Tensor("IN", values.astype(np.int32)),
                    pb_utils.Tensor("DELAY", np.zeros(values.shape, np.uint32)),
                    pb_utils.Tensor("WAIT", np.array([0], np.uint32)),
                ],
                requested_output_names=["OUT"],
            )
        responses = bls.exec(decoupled=True)
        cancelled = False
        seen = 0
        for response in responses:
            if response.has_error():
                if response.error().code() == pb_utils.TritonError.CANCELLED:
                    cancelled = True
                    continue
                sender.send(pb_utils.InferenceResponse(error=response.error()),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return
            out = pb_utils.get_output_tensor_by_name(response, "TICKS" if cancel_after > 0 else "OUT")
            if out is None:
                continue  # the bare final flag
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out.as_numpy().astype(np.int32))]))
            seen += 1
            if seen == cancel_after:
                responses.cancel()
        # An ended stream replays from its first response, as in Triton.
        if cancel_after == 0 and sum(1 for _ in responses) != seen + 1:
            raise pb_utils.TritonModelException("a second iteration did not replay the %d responses" % (seen + 1))
        sender.send(
            pb_utils.InferenceResponse([pb_utils.Tensor("CANCELLED", np.array([cancelled], np.bool_))]),
            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
        )
