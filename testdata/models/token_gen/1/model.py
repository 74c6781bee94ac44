"""token_gen: a toy text generator for the generate extension (no weights).

For each request the model streams max_tokens responses (a request
parameter, default 16), each with text_output holding one "token": the
words of text_input in turn, each followed by a space. delay_ms (default 0)
waits between tokens. With fail_after=N it sends N tokens and then an error
response as the final one. With wait_for=<path> it sends the first token
and then waits until that file exists; after 30 s it ends the request with
the error "token_gen: timed out waiting for <path>". Before every token it checks is_cancelled(); a
cancelled request stops there, is closed with the final flag and logged as
"token_gen: cancelled after N tokens". With progress_file=<path> it writes
the number of tokens sent so far to that file after every 100 tokens. Requests run one after another, so a
request that follows a cancelled one starts only when that one has stopped.
"""

import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.logger = pb_utils.Logger

    def execute(self, requests):
        for request in requests:
            self.generate(request)
        return None

    def generate(self, request):
        sender = request.get_response_sender()
        params = json.loads(request.parameters() or "{}")
        max_tokens = int(params.get("max_tokens", 16))
        delay = float(params.get("delay_ms", 0)) / 1000.0
        fail_after = int(params.get("fail_after", -1))
        wait_for = params.get("wait_for")
        progress = params.get("progress_file")
        prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
        text = prompt.reshape(-1)[0]
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        words = text.split() or ["<empty>"]
        for i in range(max_tokens):
            if i == fail_after:
                err = pb_utils.TritonError("token_gen: failed after {} tokens".format(i))
                sender.send(pb_utils.InferenceResponse(error=err), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return
            if sender.is_cancelled():
                self.logger.log_info("token_gen: cancelled after {} tokens".format(i))
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return
            if delay and i > 0:
                time.sleep(delay)
            if wait_for and i == 1:
                deadline = time.monotonic() + 30
                while not os.path.exists(wait_for):
                    if time.monotonic() > deadline:
                        err = pb_utils.TritonError("token_gen: timed out waiting for " + wait_for)
                        sender.send(pb_utils.InferenceResponse(error=err), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                        return
                    time.sleep(0.01)
            token = np.array([(words[i % len(words)] + " ").encode("utf-8")], dtype=np.object_)
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("text_output", token)]))
            if progress and (i + 1) % 100 == 0:
                with open(progress + ".tmp", "w") as f:
                    f.write(str(i + 1))
                os.replace(progress + ".tmp", progress)
        self.logger.log_info("token_gen: finished {} tokens".format(max_tokens))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
