package openai

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"

	"github.com/stubvisor/stubvisor/backendapi"
)

// A generation runs each of its n choices as one Backend.InferStream
// request (the model sees n requests, the k-th with seed+k when a seed is
// set) and hands their responses, decoded, to the handler's goroutine
// through one bounded queue: a client that reads slowly makes the
// callbacks wait, and with them the model, as generate_stream does. The
// request context is the client's, so a client that goes away cancels
// every choice (is_cancelled() turns true in the model).

// queueLen bounds the pieces waiting for the handler.
const queueLen = 32

// piece is one model response of one choice, copied out of the response.
type piece struct {
	choice     int
	text       string
	prompt     int64 // num_input_tokens, or -1
	completion int64 // num_output_tokens, or -1
	finish     string
	logprobs   string // vLLM's JSON, or ""
	final      bool
	err        error
}

func decodePiece(choice int, resp *backendapi.InferResponse, err error, final bool) piece {
	p := piece{choice: choice, final: final, err: err, prompt: -1, completion: -1}
	if err != nil || resp == nil {
		return p
	}
	p.text, _ = outputText(resp, "text_output")
	if n, ok := outputCount(resp, "num_input_tokens"); ok {
		p.prompt = n
	}
	if n, ok := outputCount(resp, "num_output_tokens"); ok {
		p.completion = n
	}
	p.finish, _ = outputText(resp, "finish_reason")
	p.logprobs, _ = outputText(resp, "logprobs")
	return p
}

// generation is n choices in flight.
type generation struct {
	queue  chan piece
	cancel context.CancelFunc
	wg     sync.WaitGroup
	errMu  sync.Mutex
	reqErr error // the first error of a request itself (not of a response)
}

// startGeneration submits one request per spec. The queue closes when
// every request has ended.
func (s *Server) startGeneration(r *http.Request, info *modelInfo, specs []*genSpec) (*generation, error) {
	reqs := make([]*backendapi.InferRequest, len(specs))
	for i, g := range specs {
		req, err := buildGenRequest(info, g)
		if err != nil {
			return nil, err
		}
		reqs[i] = req
	}
	ctx, cancel := context.WithCancel(r.Context())
	gen := &generation{queue: make(chan piece, queueLen), cancel: cancel}
	for i, req := range reqs {
		gen.wg.Add(1)
		submit, end := s.trace(r, info.name)
		submit(req)
		go func() {
			defer gen.wg.Done()
			defer end()
			err := s.backend.InferStream(ctx, req, func(resp *backendapi.InferResponse, err error, final bool) {
				if err == nil && (resp == nil || final && len(resp.Outputs) == 0) {
					// The final flag alone.
					select {
					case gen.queue <- piece{choice: i, final: true, prompt: -1, completion: -1}:
					case <-ctx.Done():
					}
					return
				}
				p := decodePiece(i, resp, err, final)
				select {
				case gen.queue <- p:
				case <-ctx.Done():
				}
			})
			if err != nil {
				gen.errMu.Lock()
				if gen.reqErr == nil {
					gen.reqErr = err
				}
				gen.errMu.Unlock()
				cancel()
			}
		}()
	}
	go func() {
		gen.wg.Wait()
		close(gen.queue)
	}()
	return gen, nil
}

// trace starts the trace of one model request (Options.Trace).
func (s *Server) trace(r *http.Request, model string) (func(*backendapi.InferRequest), func()) {
	if s.opts.Trace == nil {
		return func(*backendapi.InferRequest) {}, func() {}
	}
	return s.opts.Trace(r, model)
}

// requestError returns the first request error, once the queue is closed.
func (gen *generation) requestError() error {
	gen.errMu.Lock()
	defer gen.errMu.Unlock()
	return gen.reqErr
}

// stop cancels what runs and waits for the queue to close.
func (gen *generation) stop() {
	gen.cancel()
	for range gen.queue {
	}
}

// choiceState accumulates one choice.
type choiceState struct {
	text       []byte
	prompt     int64
	completion int64
	finish     string
	logprobs   []json.RawMessage // vLLM entries, one per token
	done       bool
}

func (c *choiceState) add(p piece) {
	c.text = append(c.text, p.text...)
	if p.prompt >= 0 && c.prompt < 0 {
		c.prompt = p.prompt
	}
	if p.completion >= 0 {
		c.completion = max(c.completion, 0) + p.completion
	}
	if p.finish != "" {
		c.finish = p.finish
	}
	if p.logprobs != "" {
		var entries []json.RawMessage
		if json.Unmarshal([]byte(p.logprobs), &entries) == nil {
			c.logprobs = append(c.logprobs, entries...)
		}
	}
	if p.final {
		c.done = true
	}
}

// finishReason is the model's finish reason, or "length" when it produced
// max_tokens, or "stop".
func (c *choiceState) finishReason(maxTokens int64) string {
	switch {
	case c.finish != "":
		return c.finish
	case c.completion >= maxTokens:
		return "length"
	}
	return "stop"
}

// usage is OpenAI's token counts.
type usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// usageOf sums the choices' counts: the prompt once, the completions of
// all. It is nil when the model reports no counts.
func usageOf(choices []*choiceState) *usage {
	u := &usage{}
	seen := false
	for i, c := range choices {
		if c.prompt >= 0 && i == 0 {
			u.PromptTokens = c.prompt
			seen = true
		}
		if c.completion >= 0 {
			u.CompletionTokens += c.completion
			seen = true
		}
	}
	if !seen {
		return nil
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

func newChoices(n int) []*choiceState {
	cs := make([]*choiceState, n)
	for i := range cs {
		cs[i] = &choiceState{prompt: -1, completion: -1}
	}
	return cs
}

// collect runs a generation to its end and returns its choices, or the
// first error (of a request or of a response).
func collect(gen *generation, n int) ([]*choiceState, error) {
	cs := newChoices(n)
	var firstErr error
	for p := range gen.queue {
		if p.err != nil && firstErr == nil {
			firstErr = p.err
			gen.cancel()
		}
		cs[p.choice].add(p)
	}
	if err := gen.requestError(); err != nil {
		return nil, err
	}
	if firstErr != nil {
		return nil, firstErr
	}
	return cs, nil
}

// sseWriter writes a stream's events, starting the response on the first.
type sseWriter struct {
	w       http.ResponseWriter
	flusher http.Flusher
	started bool
	broken  bool
}

func newSSEWriter(w http.ResponseWriter) *sseWriter {
	f, _ := w.(http.Flusher)
	return &sseWriter{w: w, flusher: f}
}

// event writes "data: <json>\n\n"; false means the client is gone.
func (sw *sseWriter) event(v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		return true
	}
	return sw.raw(b)
}

func (sw *sseWriter) raw(b []byte) bool {
	if sw.broken {
		return false
	}
	if !sw.started {
		sw.started = true
		h := sw.w.Header()
		h.Set("Content-Type", "text/event-stream; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		sw.w.WriteHeader(http.StatusOK)
	}
	buf := make([]byte, 0, len(b)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, b...)
	buf = append(buf, "\n\n"...)
	if _, err := sw.w.Write(buf); err != nil {
		sw.broken = true
		return false
	}
	return true
}

// flush sends what is buffered when nothing more is waiting.
func (sw *sseWriter) flush(pending int) {
	if pending == 0 && sw.flusher != nil && !sw.broken {
		sw.flusher.Flush()
	}
}

// done ends the stream with "data: [DONE]".
func (sw *sseWriter) done() {
	sw.raw([]byte("[DONE]"))
	sw.flush(0)
}

// streamError writes an error in the stream: as the HTTP answer when
// nothing was sent yet, else as an event holding OpenAI's error object.
func (sw *sseWriter) streamError(err error) {
	if !sw.started {
		writeError(sw.w, err)
		sw.started, sw.broken = true, true
		return
	}
	_, obj := newErrorObject(err)
	sw.event(obj)
}

// endStream ends a stream after its last choice chunk: nothing more when
// the client is gone, an error chunk when the model failed, else the
// usage chunk (when usageChunk returns one) and then [DONE].
func endStream(sw *sseWriter, gen *generation, failed bool, usageChunk func() any) {
	if failed || sw.broken {
		if failed && !sw.broken {
			sw.done()
		}
		return
	}
	if err := gen.requestError(); err != nil {
		sw.streamError(err)
		if !sw.broken {
			sw.done()
		}
		return
	}
	if chunk := usageChunk(); chunk != nil {
		sw.event(chunk)
	}
	sw.done()
}

// streamPieces hands each piece of gen to chunk, in order, flushing after
// each, until the client is gone or a piece carries an error; that error
// is sent as an error chunk and the rest of the generation is cancelled
// and drained. It reports whether a piece failed.
func streamPieces(gen *generation, sw *sseWriter, chunk func(p piece)) (failed bool) {
	for p := range gen.queue {
		if failed || sw.broken {
			continue
		}
		if p.err != nil {
			sw.streamError(p.err)
			failed = true
			gen.cancel()
			continue
		}
		chunk(p)
		sw.flush(len(gen.queue))
	}
	return failed
}
