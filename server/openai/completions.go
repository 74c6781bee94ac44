package openai

import (
	"net/http"
	"time"
)

// completion is a /v1/completions response (and, as a chunk, one event of
// its stream).
type completion struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	SystemFingerprint *string            `json:"system_fingerprint"`
	Choices           []completionChoice `json:"choices"`
	Usage             *usage             `json:"usage,omitempty"`
}

type completionChoice struct {
	Index        int                `json:"index"`
	Text         string             `json:"text"`
	Logprobs     *completionLogprob `json:"logprobs"`
	FinishReason *string            `json:"finish_reason"`
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if err := s.readBody(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := req.check(); err != nil {
		writeError(w, err)
		return
	}
	prompt, err := parsePrompt(req.Prompt)
	if err != nil {
		writeError(w, err)
		return
	}
	if req.Suffix != nil && *req.Suffix != "" {
		writeError(w, badRequest("suffix", "suffix is not currently supported"))
		return
	}
	if req.Logprobs != nil && (*req.Logprobs < 0 || *req.Logprobs > 5) {
		writeError(w, badRequest("logprobs", "logprobs must be between 0 and 5, got %d", *req.Logprobs))
		return
	}
	info, lora, err := s.models.lookup(r.Context(), req.Model, false)
	if err != nil {
		writeError(w, err)
		return
	}
	logprobs := 0
	if req.Logprobs != nil {
		logprobs = *req.Logprobs
	}
	if logprobs > 0 && info.layout != layoutVLLM {
		writeError(w, badRequest("logprobs", "logprobs are currently available only for the vLLM backend"))
		return
	}
	base := s.baseSpec(&req.sampling, info, lora, req.MaxTokens)
	base.prompt, base.echo, base.logprobs = prompt, req.Echo, logprobs
	gen, err := s.startGeneration(r, info, choiceSpecs(base, req.choices()))
	if err != nil {
		writeError(w, err)
		return
	}
	out := completion{ID: "cmpl-" + randomHex(12), Object: "text_completion", Created: time.Now().Unix(), Model: req.Model}
	if req.streaming() {
		s.streamCompletion(w, gen, out, req.choices(), base.maxTokens, req.includeUsage())
		return
	}
	choices, err := collect(gen, req.choices())
	if err != nil {
		writeError(w, err)
		return
	}
	for i, c := range choices {
		fr := c.finishReason(base.maxTokens)
		out.Choices = append(out.Choices, completionChoice{Index: i, Text: string(c.text), FinishReason: &fr,
			Logprobs: completionLogprobs(c.logprobs, 0)})
	}
	out.Usage = usageOf(choices)
	writeJSON(w, http.StatusOK, out)
}

// baseSpec is the generation a request asks for, before the prompt.
func (s *Server) baseSpec(req *sampling, info *modelInfo, lora string, maxTokens *int64) *genSpec {
	g := &genSpec{stream: req.streaming(), maxTokens: int64(s.opts.DefaultMaxTokens), temperature: req.Temperature,
		topP: req.TopP, freqPenalty: req.FrequencyPenalty, presPenalty: req.PresencePenalty, seed: req.Seed, stops: req.stops, lora: lora}
	if maxTokens != nil {
		g.maxTokens = *maxTokens
	}
	for i, l := range info.loras {
		if l == lora {
			g.loraIndex = i + 1
		}
	}
	return g
}

// choiceSpecs makes the n requests of n choices: the k-th with seed+k, so
// that a seeded request is repeatable and its choices still differ.
func choiceSpecs(base *genSpec, n int) []*genSpec {
	specs := make([]*genSpec, n)
	for k := range specs {
		g := *base
		if base.seed != nil && k > 0 {
			seed := *base.seed + int64(k)
			g.seed = &seed
		}
		specs[k] = &g
	}
	return specs
}

// streamCompletion writes a completion's stream: one chunk per response,
// the finish reason on each choice's last, the usage chunk when asked,
// then [DONE]. An error ends the stream with an error event.
func (s *Server) streamCompletion(w http.ResponseWriter, gen *generation, base completion, n int, maxTokens int64, withUsage bool) {
	defer gen.stop()
	sw := newSSEWriter(w)
	cs := newChoices(n)
	offsets := make([]int, n)
	failed := streamPieces(gen, sw, func(p piece) {
		c := cs[p.choice]
		c.add(p)
		chunk := base
		ch := completionChoice{Index: p.choice, Text: p.text}
		if len(c.logprobs) > 0 {
			ch.Logprobs = completionLogprobs(c.logprobs, offsets[p.choice])
			offsets[p.choice] = len(c.logprobs)
		}
		if p.final {
			fr := c.finishReason(maxTokens)
			ch.FinishReason = &fr
		}
		chunk.Choices = []completionChoice{ch}
		if !sw.event(chunk) {
			gen.cancel()
		}
	})
	endStream(sw, gen, failed, func() any {
		if !withUsage {
			return nil
		}
		chunk := base
		chunk.Choices = []completionChoice{}
		if chunk.Usage = usageOf(cs); chunk.Usage == nil {
			chunk.Usage = &usage{}
		}
		return chunk
	})
}
