package openai

import (
	"net/http"
	"time"
)

// chatCompletion is a /v1/chat/completions response, or one chunk of its
// stream (Object "chat.completion.chunk", Delta set instead of Message).
type chatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint *string      `json:"system_fingerprint"`
	Choices           []chatChoice `json:"choices"`
	Usage             *usage       `json:"usage,omitempty"`
}

type chatChoice struct {
	Index        int           `json:"index"`
	Message      *chatMessage  `json:"message,omitempty"`
	Delta        *chatMessage  `json:"delta,omitempty"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

type chatMessage struct {
	Role      string     `json:"role,omitempty"`
	Content   *string    `json:"content,omitempty"`
	ToolCalls []toolCall `json:"tool_calls,omitempty"`
}

// chatPlan is what a validated chat request asks of the output.
type chatPlan struct {
	named     string     // a function the output is the arguments of
	parser    toolParser // parse tool calls out of the output, or nil
	topLogp   int        // top_logprobs
	logprobs  bool
	maxTokens int64
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if err := s.readBody(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	plan, err := s.checkChat(&req)
	if err != nil {
		writeError(w, err)
		return
	}
	info, lora, err := s.models.lookup(r.Context(), req.Model, false)
	if err != nil {
		writeError(w, err)
		return
	}
	if plan.logprobs && info.layout != layoutVLLM {
		writeError(w, badRequest("logprobs", "logprobs are currently available only for the vLLM backend"))
		return
	}
	tmpl := s.tmpl
	if tmpl == nil {
		if tmpl, err = info.template(); err != nil {
			writeError(w, err)
			return
		}
	}
	prompt, err := tmpl.render(renderInput{messages: req.Messages, tools: req.Tools, extra: req.ChatTemplateKwargs})
	if err != nil {
		writeError(w, err)
		return
	}
	maxTokens := req.MaxCompletionTokens
	if maxTokens == nil {
		maxTokens = req.MaxTokens
	}
	base := s.baseSpec(&req.sampling, info, lora, maxTokens)
	base.prompt = prompt
	if plan.logprobs {
		base.logprobs = max(plan.topLogp, 1)
	}
	plan.maxTokens = base.maxTokens
	gen, err := s.startGeneration(r, info, choiceSpecs(base, req.choices()))
	if err != nil {
		writeError(w, err)
		return
	}
	out := chatCompletion{ID: "chatcmpl-" + randomHex(12), Object: "chat.completion", Created: time.Now().Unix(), Model: req.Model}
	if req.streaming() {
		out.Object = "chat.completion.chunk"
		s.streamChat(w, gen, out, req.choices(), plan, req.includeUsage())
		return
	}
	choices, err := collect(gen, req.choices())
	if err != nil {
		writeError(w, err)
		return
	}
	for i, c := range choices {
		msg, fr := plan.message(string(c.text), out.ID, c.finishReason(plan.maxTokens))
		ch := chatChoice{Index: i, Message: msg, FinishReason: &fr}
		if plan.logprobs {
			ch.Logprobs = chatLogprobsOf(c.logprobs, 0, plan.topLogp)
		}
		out.Choices = append(out.Choices, ch)
	}
	out.Usage = usageOf(choices)
	writeJSON(w, http.StatusOK, out)
}

// checkChat validates a chat request as Triton's frontend does.
func (s *Server) checkChat(req *chatRequest) (*chatPlan, error) {
	if err := req.check(); err != nil {
		return nil, err
	}
	if req.MaxCompletionTokens != nil && *req.MaxCompletionTokens < 1 {
		return nil, badRequest("max_completion_tokens", "max_completion_tokens must be at least 1, got %d", *req.MaxCompletionTokens)
	}
	plan := &chatPlan{logprobs: req.Logprobs != nil && *req.Logprobs}
	if req.TopLogprobs != nil {
		if !plan.logprobs {
			return nil, badRequest("top_logprobs", "`top_logprobs` can only be used when `logprobs` is True")
		}
		if *req.TopLogprobs < 0 || *req.TopLogprobs > 20 {
			return nil, badRequest("top_logprobs", "top_logprobs must be between 0 and 20, got %d", *req.TopLogprobs)
		}
		plan.topLogp = *req.TopLogprobs
	}
	if len(req.Messages) == 0 {
		return nil, badRequest("messages", "'messages' is required")
	}
	names, err := toolNames(req.Tools)
	if err != nil {
		return nil, err
	}
	choice, err := parseToolChoice(req.ToolChoice)
	if err != nil {
		return nil, err
	}
	switch {
	case choice.mode == "required" && len(names) == 0:
		return nil, badRequest("tool_choice", `"required" tool choice requires CreateChatCompletionRequest.tools to be provided`)
	case choice.mode == "named" && len(names) == 0:
		return nil, badRequest("tool_choice", "Named tool choice requires CreateChatCompletionRequest.tools to be provided")
	case choice.mode == "auto" && s.parser == nil:
		return nil, badRequest("tool_choice", `"auto" tool choice requires --tool-call-parser to be set`)
	case choice.mode == "" && len(names) > 0 && s.parser == nil:
		return nil, badRequest("tools", "having tools in the request requires --tool-call-parser to be set")
	}
	switch choice.mode {
	case "named":
		if !containsString(names, choice.name) {
			return nil, badRequest("tool_choice", "Tool '%s' has not been passed in `tools`.", choice.name)
		}
		plan.named = choice.name
	case "required":
		plan.named = names[0]
	case "", "auto":
		if len(names) > 0 {
			plan.parser = s.parser
		}
	}
	return plan, nil
}

// message turns a choice's whole text into its message and finish reason.
func (p *chatPlan) message(text, id, finish string) (*chatMessage, string) {
	if p.named != "" {
		empty := ""
		return &chatMessage{Role: "assistant", Content: &empty, ToolCalls: []toolCall{
			{ID: id, Type: "function", Function: toolFunction{Name: p.named, Arguments: text}}}}, finish
	}
	if p.parser != nil {
		if calls, ok := p.parser.parse(text); ok {
			empty := ""
			return &chatMessage{Role: "assistant", Content: &empty, ToolCalls: calls}, "tool_calls"
		}
	}
	return &chatMessage{Role: "assistant", Content: &text}, finish
}

// chatStream is one choice of a chat stream.
type chatStream struct {
	started  bool   // the role chunk was sent
	held     []byte // text held back while it may be a tool call
	nameSent bool   // a named function's first chunk was sent
	plain    bool   // the text is not a tool call: stream it as it comes
	logpSent int
}

// streamChat writes a chat stream: per choice a first chunk with the role,
// then one chunk per response with its text, the finish reason on the
// last; the usage chunk when asked, then [DONE]. With a tool-call parser,
// text that may be a tool call is held back and sent, at the end, as
// tool_calls when it parses.
func (s *Server) streamChat(w http.ResponseWriter, gen *generation, base chatCompletion, n int, plan *chatPlan, withUsage bool) {
	defer gen.stop()
	sw := newSSEWriter(w)
	cs := newChoices(n)
	streams := make([]chatStream, n)
	send := func(ch chatChoice) {
		chunk := base
		chunk.Choices = []chatChoice{ch}
		if !sw.event(chunk) {
			gen.cancel()
		}
	}
	failed := streamPieces(gen, sw, func(p piece) {
		c, st := cs[p.choice], &streams[p.choice]
		c.add(p)
		if !st.started {
			st.started = true
			empty := ""
			send(chatChoice{Index: p.choice, Delta: &chatMessage{Role: "assistant", Content: &empty}})
		}
		ch := chatChoice{Index: p.choice, Delta: plan.delta(st, p.text, base.ID, p.final)}
		if plan.logprobs && len(c.logprobs) > st.logpSent {
			ch.Logprobs = chatLogprobsOf(c.logprobs, st.logpSent, plan.topLogp)
			st.logpSent = len(c.logprobs)
		}
		if p.final {
			fr := c.finishReason(plan.maxTokens)
			if ch.Delta != nil && len(ch.Delta.ToolCalls) > 0 && plan.named == "" {
				fr = "tool_calls"
			}
			ch.FinishReason = &fr
		}
		if ch.Delta != nil || ch.FinishReason != nil {
			if ch.Delta == nil {
				empty := ""
				ch.Delta = &chatMessage{Content: &empty}
			}
			send(ch)
		}
	})
	endStream(sw, gen, failed, func() any {
		if !withUsage {
			return nil
		}
		chunk := base
		chunk.Choices = []chatChoice{}
		if chunk.Usage = usageOf(cs); chunk.Usage == nil {
			chunk.Usage = &usage{}
		}
		return chunk
	})
}

// delta is the chunk content for one response's text: content, the
// arguments of a named function, or (held back while it may be a tool
// call) tool calls once the stream ends. nil means nothing to send yet.
func (p *chatPlan) delta(st *chatStream, text, id string, final bool) *chatMessage {
	if p.named != "" {
		if text == "" {
			return nil
		}
		zero := 0
		call := toolCall{Index: &zero, Function: toolFunction{Arguments: text}}
		if !st.nameSent { // the first chunk names the function
			st.nameSent = true
			call.ID, call.Type, call.Function.Name = id, "function", p.named
		}
		return &chatMessage{ToolCalls: []toolCall{call}}
	}
	if p.parser != nil && !st.plain {
		st.held = append(st.held, text...)
		held := string(st.held)
		if !final && p.parser.mayStart(held) {
			return nil
		}
		st.held = nil
		if final {
			if calls, ok := p.parser.parse(held); ok {
				for i := range calls {
					idx := i
					calls[i].Index = &idx
				}
				return &chatMessage{ToolCalls: calls}
			}
		}
		st.plain = true
		if held == "" {
			return nil
		}
		return &chatMessage{Content: &held}
	}
	if text == "" {
		return nil
	}
	return &chatMessage{Content: &text}
}
