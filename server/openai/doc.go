// Package openai serves the OpenAI-compatible API (/v1/models,
// /v1/completions, /v1/chat/completions, /v1/embeddings) over a
// backendapi.Backend, as Triton's OpenAI frontend (server repo,
// python/openai) does, but inside the server process: requests run through
// Backend.InferStream on the same models and supervisor as the KServe
// front ends, so a client that disconnects cancels its request and the
// metrics count it.
//
// A request names a model; the model's inputs decide how the request is
// mapped onto it (layout.go): the vLLM backend's layout (text_input, stream
// and sampling_parameters as JSON) or the TRT-LLM layout (text_input,
// stream, max_tokens, temperature, ... as tensors), the layout Triton uses
// for Python, ensemble and BLS models. Chat prompts are rendered with the
// model's Hugging Face chat template (template.go), and tool calls in the
// output are parsed Llama 3 or Mistral style (tools.go). docs/openai.md is
// the user's guide.
package openai
