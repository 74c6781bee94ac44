"""async_raise_decoupled: a decoupled `async def execute` that closes each
request with an empty final response and then raises. The request is
over for the client; the error reaches only the server's log, which must
show it at once although no request is in flight any more."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        for request in requests:
            request.get_response_sender().send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        raise ValueError("async_raise_decoupled: raised after the final response")
