"""tiny_lm: a real, if tiny, language model for the OpenAI front end.

At initialize it trains a character-level 4-gram model (counts with
backoff to shorter contexts) on corpus.txt beside this file; a token is one
character. execute samples from it and, when the request asks to stream,
sends one response per token (decoupled).

It reads its request in either of Triton's LLM layouts, whichever its
config declares:
- vLLM: text_input, stream, sampling_parameters (a JSON object with
  max_tokens, temperature, top_p, seed, stop, logprobs),
  exclude_input_in_output, return_num_input_tokens,
  return_num_output_tokens, return_logprobs, return_finish_reason;
- TRT-LLM: text_input, stream, max_tokens, temperature, top_p, seed,
  stop_words, exclude_input_in_output, return_num_input_tokens,
  return_num_output_tokens.
Outputs: text_output, num_input_tokens and num_output_tokens (the tokens of
this response), and where asked, logprobs (vLLM's JSON) and finish_reason.

Temperature 0 is greedy; a seed makes sampling repeatable. A stop string
ends the text before it (held back while it may still be one). For tests:
a prompt containing "#fail" gets an error response after 3 tokens, and one
containing "#slow" waits 20 ms per token. Before every token it checks
is_cancelled(); a cancelled request is logged as "tiny_lm: request '<id>'
cancelled after N tokens" and closed with the final flag.
"""

import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils

ORDER = 3  # characters of context


class Ngram:
    """Character n-gram counts with backoff to shorter contexts."""

    def __init__(self, text):
        self.vocab = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.vocab)}
        self.counts = {}
        for n in range(ORDER + 1):
            for i in range(n, len(text)):
                ctx = text[i - n:i]
                row = self.counts.get(ctx)
                if row is None:
                    row = self.counts[ctx] = np.zeros(len(self.vocab), np.float64)
                row[self.index[text[i]]] += 1

    def logprobs(self, context):
        """Log-probabilities of the next character after context."""
        known = "".join(c for c in context if c in self.index)
        for n in range(min(ORDER, len(known)), -1, -1):
            row = self.counts.get(known[len(known) - n:])
            if row is not None:
                p = row + 0.01
                return np.log(p / p.sum())
        raise AssertionError("the empty context is always known")


def sample(logp, temperature, top_p, rng):
    """Index of the next token: greedy at temperature 0, else nucleus."""
    if temperature <= 0:
        return int(np.argmax(logp))
    z = logp / temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    if top_p < 1.0:
        order = np.argsort(-p)
        keep = np.cumsum(p[order]) - p[order] < top_p
        q = np.zeros_like(p)
        q[order[keep]] = p[order[keep]]
        p = q / q.sum()
    return int(rng.choice(len(p), p=p))


class TritonPythonModel:
    def initialize(self, args):
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "corpus.txt"), encoding="utf-8") as f:
            self.lm = Ngram(f.read())
        config = json.loads(args["model_config"])
        self.inputs = {i["name"] for i in config["input"]}
        self.logger = pb_utils.Logger

    def execute(self, requests):
        for request in requests:
            self.generate(request)
        return None

    def scalar(self, request, name, default):
        t = pb_utils.get_input_tensor_by_name(request, name)
        if t is None:
            return default
        v = t.as_numpy().reshape(-1)
        if len(v) == 0:
            return default
        if isinstance(v[0], bytes):
            return v[0].decode("utf-8")
        return v[0].item()

    def params(self, request):
        """The sampling settings of either layout, as one dict."""
        if "sampling_parameters" in self.inputs:
            p = json.loads(self.scalar(request, "sampling_parameters", "{}") or "{}")
        else:
            p = {}
            for name in ("max_tokens", "temperature", "top_p", "seed"):
                v = self.scalar(request, name, None)
                if v is not None:
                    p[name] = v
            t = pb_utils.get_input_tensor_by_name(request, "stop_words")
            if t is not None:
                p["stop"] = [s.decode("utf-8") for s in t.as_numpy().reshape(-1)]
        stop = p.get("stop") or []
        p["stop"] = [stop] if isinstance(stop, str) else [s for s in stop if s]
        return p

    def generate(self, request):
        sender = request.get_response_sender()
        prompt = self.scalar(request, "text_input", "")
        p = self.params(request)
        max_tokens = int(p.get("max_tokens", 16))
        temperature = float(p.get("temperature", 1.0))
        top_p = float(p.get("top_p", 1.0))
        seed = p.get("seed")
        rng = np.random.default_rng(None if seed is None else int(seed))
        want_logprobs = bool(self.scalar(request, "return_logprobs", False)) and p.get("logprobs")
        top_k = int(p.get("logprobs") or 0)
        out = Output(self, request, sender, prompt, bool(self.scalar(request, "stream", False)))
        if not self.scalar(request, "exclude_input_in_output", True):
            out.echo = prompt
        delay = 0.02 if "#slow" in prompt else 0
        for i in range(max_tokens):
            if sender.is_cancelled():
                self.logger.log_info("tiny_lm: request '%s' cancelled after %d tokens" % (request.request_id(), i))
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return
            if "#fail" in prompt and i == 3:
                err = pb_utils.TritonError("tiny_lm: failed after 3 tokens, as the prompt asked")
                sender.send(pb_utils.InferenceResponse(error=err), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return
            if delay:
                time.sleep(delay)
            logp = self.lm.logprobs(prompt + out.text)
            k = sample(logp, temperature, top_p, rng)
            out.add(self.lm.vocab[k], logp, k, top_k if want_logprobs else 0)
            if out.stopped(p["stop"]):
                out.finish("stop")
                return
            out.flush(p["stop"])
        out.finish("length")


class Output:
    """The text generated so far and what of it was sent."""

    def __init__(self, model, request, sender, prompt, stream):
        self.model, self.request, self.sender, self.stream = model, request, sender, stream
        self.prompt_tokens = len(prompt)
        self.text = ""
        self.sent = 0  # characters of text already sent
        self.tokens = 0  # tokens generated and not yet reported
        self.logprobs = []
        self.echo = ""  # the prompt, when the output repeats it

    def add(self, ch, logp, k, top_k):
        self.text += ch
        self.tokens += 1
        if top_k:
            vocab = self.model.lm.vocab
            ranked = list(np.argsort(-logp))
            entry = {str(k): {"logprob": float(logp[k]), "rank": ranked.index(k) + 1, "decoded_token": ch}}
            for r, j in enumerate(ranked[:top_k]):
                entry[str(int(j))] = {"logprob": float(logp[j]), "rank": r + 1, "decoded_token": vocab[j]}
            self.logprobs.append(entry)

    def stopped(self, stops):
        """True, with the text cut before it, when a stop string appeared."""
        for s in stops:
            at = self.text.find(s, max(0, self.sent - len(s)))
            if at >= 0:
                self.text = self.text[:at]
                return True
        return False

    def flush(self, stops):
        """Sends (streaming) what cannot be the start of a stop string."""
        if not self.stream:
            return
        hold = 0
        for s in stops:
            for n in range(min(len(s) - 1, len(self.text)), 0, -1):
                if self.text.endswith(s[:n]):
                    hold = max(hold, n)
                    break
        end = len(self.text) - hold
        if end > self.sent:
            self.send(self.text[self.sent:end], None, 0)

    def finish(self, reason):
        self.send(self.text[self.sent:], reason, pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def send(self, text, reason, flags):
        names = self.model.inputs
        text, self.echo = self.echo + text, ""
        outs = [pb_utils.Tensor("text_output", np.array([text.encode("utf-8")], dtype=np.object_))]
        if self.model.scalar(self.request, "return_num_input_tokens", "return_num_input_tokens" not in names):
            outs.append(pb_utils.Tensor("num_input_tokens", np.array([self.prompt_tokens], np.uint32)))
        if self.model.scalar(self.request, "return_num_output_tokens", "return_num_output_tokens" not in names):
            outs.append(pb_utils.Tensor("num_output_tokens", np.array([self.tokens], np.uint32)))
        if self.logprobs:
            outs.append(pb_utils.Tensor("logprobs", np.array([json.dumps(self.logprobs).encode()], dtype=np.object_)))
        if self.model.scalar(self.request, "return_finish_reason", False):
            outs.append(pb_utils.Tensor("finish_reason", np.array([(reason or "").encode()], dtype=np.object_)))
        self.sender.send(pb_utils.InferenceResponse(outs), flags=flags)
        self.sent, self.tokens, self.logprobs = len(self.text), 0, []
