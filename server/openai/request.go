package openai

import (
	"encoding/json"
	"math"
)

// sampling holds the request fields that completions and chat share.
type sampling struct {
	Model            string          `json:"model"`
	MaxTokens        *int64          `json:"max_tokens"`
	Temperature      *float64        `json:"temperature"`
	TopP             *float64        `json:"top_p"`
	N                *int            `json:"n"`
	Stream           *bool           `json:"stream"`
	StreamOptions    *streamOptions  `json:"stream_options"`
	Stop             json.RawMessage `json:"stop"`
	Seed             *int64          `json:"seed"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	LogitBias        map[string]any  `json:"logit_bias"`
	User             string          `json:"user"`

	stops []string // Stop, parsed
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// completionRequest is POST /v1/completions.
type completionRequest struct {
	sampling
	Prompt   json.RawMessage `json:"prompt"`
	Echo     *bool           `json:"echo"`
	Logprobs *int            `json:"logprobs"`
	Suffix   *string         `json:"suffix"`
	BestOf   *int            `json:"best_of"`
}

// chatRequest is POST /v1/chat/completions. Messages, tools and
// tool_choice stay raw: they go to the chat template with their key order.
type chatRequest struct {
	sampling
	Messages            json.RawMessage `json:"messages"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	Logprobs            *bool           `json:"logprobs"`
	TopLogprobs         *int            `json:"top_logprobs"`
	Tools               json.RawMessage `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls"`
	ChatTemplateKwargs  json.RawMessage `json:"chat_template_kwargs"`
}

// embeddingRequest is POST /v1/embeddings.
type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
	User           string          `json:"user"`
}

// maxN bounds n, as OpenAI does.
const maxN = 128

// check validates the shared fields against OpenAI's ranges.
func (s *sampling) check() error {
	if s.Model == "" {
		return badRequest("model", "'model' is required")
	}
	if s.MaxTokens != nil && *s.MaxTokens < 1 {
		return badRequest("max_tokens", "max_tokens must be at least 1, got %d", *s.MaxTokens)
	}
	if t := s.Temperature; t != nil && (*t < 0 || *t > 2 || math.IsNaN(*t)) {
		return badRequest("temperature", "temperature must be between 0 and 2, got %v", *t)
	}
	if p := s.TopP; p != nil && (*p < 0 || *p > 1 || math.IsNaN(*p)) {
		return badRequest("top_p", "top_p must be between 0 and 1, got %v", *p)
	}
	if s.N != nil && (*s.N < 1 || *s.N > maxN) {
		return badRequest("n", "n must be between 1 and %d, got %d", maxN, *s.N)
	}
	for _, f := range []struct {
		name string
		v    *float64
	}{{"frequency_penalty", s.FrequencyPenalty}, {"presence_penalty", s.PresencePenalty}} {
		if f.v != nil && (*f.v < -2 || *f.v > 2) {
			return badRequest(f.name, "%s must be between -2 and 2, got %v", f.name, *f.v)
		}
	}
	if len(s.LogitBias) > 0 {
		return badRequest("logit_bias", "logit bias is not currently supported")
	}
	if s.StreamOptions != nil && !s.streaming() {
		return badRequest("stream_options", "`stream_options` can only be used when `stream` is True")
	}
	stops, err := parseStop(s.Stop)
	if err != nil {
		return err
	}
	s.stops = stops
	return nil
}

func (s *sampling) streaming() bool { return s.Stream != nil && *s.Stream }

func (s *sampling) choices() int {
	if s.N == nil {
		return 1
	}
	return *s.N
}

func (s *sampling) includeUsage() bool {
	return s.StreamOptions != nil && s.StreamOptions.IncludeUsage
}

// parseStop reads stop: null, a string or up to 4 strings.
func parseStop(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badRequest("stop", "stop must be a string or an array of strings")
	}
	if len(list) > 4 {
		return nil, badRequest("stop", "stop may hold at most 4 sequences, got %d", len(list))
	}
	out := list[:0]
	for _, s := range list {
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// parsePrompt reads a completion prompt: one string (or a list of one, as
// Triton accepts).
func parsePrompt(raw json.RawMessage) (string, error) {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return "", badRequest("prompt", "prompt must be non-empty")
		}
		return one, nil
	}
	var list []string
	if json.Unmarshal(raw, &list) == nil {
		if len(list) != 1 {
			return "", badRequest("prompt", "only single string input is supported")
		}
		return parsePrompt(mustJSON(list[0]))
	}
	if len(raw) == 0 {
		return "", badRequest("prompt", "'prompt' is required")
	}
	return "", badRequest("prompt", "prompt must be a string")
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}
