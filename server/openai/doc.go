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
//
// # Files, one job each
//
//	doc.go          this description
//	openai.go       Server, Options: routing, body reading, Serve and Shutdown
//	errors.go       OpenAI's error object, and the HTTP status of an error
//	models.go       the catalog: a model's layout, listing, LoRA names; /v1/models
//	request.go      the request bodies and their validation
//	tensors.go      a generation as the model's input tensors; reading outputs
//	generate.go     n choices through InferStream, their queue, usage, the SSE writer
//	completions.go  /v1/completions, streaming or not
//	chat.go         /v1/chat/completions: tool choice, messages, the chat stream
//	template.go     Hugging Face chat templates (tokenizer_config.json) and the fallback
//	tools.go        the llama3 and mistral tool-call parsers, tool_choice
//	logprobs.go     vLLM log-probabilities in the completions and chat formats
//	embeddings.go   /v1/embeddings
//
// # Goroutines
//
// net/http's, one per connection, own each request. A generation starts
// one goroutine per choice, which runs its InferStream and ends when the
// request completes (the handler cancels it when the client goes away or a
// choice fails), and one that closes the generation's queue after them.
//
// # Lock order
//
//  1. Server.mu: the http.Servers to shut down.
//  2. catalog.mu: the cached modelInfo of each model.
//  3. generation.errMu: the first request error of a generation.
//
// Each is a leaf: none is held while taking another or calling the backend.
package openai
