"""tiny_embed: embeds a text as its hashed character trigrams.

Each trigram of the lower-cased text (padded with spaces) adds one to the
dimension its CRC-32 picks, out of 64; the vector is L2-normalised, so texts
that share trigrams are close by cosine similarity. pooling_params'
dimensions keeps the first n dimensions (normalised again). A token is a
character: num_input_tokens is the text's length.
"""

import json
import zlib

import numpy as np
import triton_python_backend_utils as pb_utils

DIMS = 64


def embed(text, dims):
    v = np.zeros(DIMS, np.float64)
    t = " " + text.lower() + " "
    for i in range(len(t) - 2):
        v[zlib.crc32(t[i:i + 3].encode("utf-8")) % DIMS] += 1.0
    v = v[:dims]
    n = np.linalg.norm(v)
    return v / n if n > 0 else v


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            raw = pb_utils.get_input_tensor_by_name(request, "embedding_request").as_numpy().reshape(-1)[0]
            body = json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
            text = body.get("input")
            if not isinstance(text, str):
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("tiny_embed: input must be one string", pb_utils.TritonError.INVALID_ARG)))
                continue
            dims = (body.get("pooling_params") or {}).get("dimensions") or [DIMS]
            vec = embed(text, max(1, min(DIMS, int(dims[0]))))
            out = json.dumps([round(float(x), 6) for x in vec]).encode("utf-8")
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("text_output", np.array([out], dtype=np.object_)),
                pb_utils.Tensor("num_input_tokens", np.array([len(text)], np.uint32)),
            ]))
        return responses
