"""textgen: a Python-based backend (no weights) that serves models laid out
as Triton's vLLM backend expects them, for the tests of Python-based
backends.

A model says backend: "textgen" and keeps its settings in model.json in
its version directory (vLLM's engine arguments; here "model" names the
model and "prefix" is put before every generated word). auto_complete_config
completes the config as the vLLM backend does: decoupled, the inputs
text_input (BYTES [1]), stream (BOOL [1], optional), sampling_parameters
(BYTES [1], optional, JSON) and exclude_input_in_output (BOOL [1],
optional), the output text_output (BYTES [-1]).

Generation repeats the words of text_input: max_tokens of them (from
sampling_parameters, default 4). With stream true each word is its own
response; otherwise one response holds the whole text. Unless
exclude_input_in_output is true, the non-streamed text starts with the
prompt, as vLLM's does. Every response carries the parameter
"backend_model_json", the model.json it read.
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        inputs = [
            {"name": "text_input", "data_type": "TYPE_STRING", "dims": [1]},
            {"name": "stream", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
            {"name": "sampling_parameters", "data_type": "TYPE_STRING", "dims": [1], "optional": True},
            {"name": "exclude_input_in_output", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
        ]
        have = {i["name"] for i in config.as_dict()["input"]}
        for i in inputs:
            if i["name"] not in have:
                config.add_input(i)
        if not config.as_dict()["output"]:
            config.add_output({"name": "text_output", "data_type": "TYPE_STRING", "dims": [-1]})
        config.set_model_transaction_policy(dict(decoupled=True))
        config.set_max_batch_size(0)
        return config

    def initialize(self, args):
        path = os.path.join(args["model_repository"], args["model_version"], "model.json")
        with open(path) as f:
            self.engine = json.load(f)
        self.engine_json = json.dumps(self.engine, sort_keys=True)
        if not pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"])):
            raise pb_utils.TritonModelException("textgen: the model must be decoupled")
        pb_utils.Logger.log_info("textgen: model {} loaded from {}".format(self.engine.get("model"), path))

    @staticmethod
    def _scalar(request, name, default):
        t = pb_utils.get_input_tensor_by_name(request, name)
        if t is None:
            return default
        v = t.as_numpy().reshape(-1)[0]
        return v.decode("utf-8") if isinstance(v, bytes) else v

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            prompt = self._scalar(request, "text_input", "")
            stream = bool(self._scalar(request, "stream", False))
            exclude = bool(self._scalar(request, "exclude_input_in_output", False))
            sampling = json.loads(self._scalar(request, "sampling_parameters", "{}") or "{}")
            n = int(sampling.get("max_tokens", 4))
            words = prompt.split() or ["<empty>"]
            prefix = self.engine.get("prefix", "")
            tokens = [prefix + words[i % len(words)] for i in range(n)]
            params = {"backend_model_json": self.engine_json}
            if stream:
                for tok in tokens:
                    out = pb_utils.Tensor("text_output", np.array([(tok + " ").encode()], dtype=np.object_))
                    sender.send(pb_utils.InferenceResponse([out], parameters=params))
            else:
                text = " ".join(tokens)
                if not exclude:
                    text = prompt + " " + text
                out = pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_))
                sender.send(pb_utils.InferenceResponse([out], parameters=params))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
