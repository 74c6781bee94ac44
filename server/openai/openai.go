package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/server/httpserve"
)

// DefaultMaxTokens is how many tokens a request that sets no max_tokens
// asks for (Triton's --default-max-tokens default).
const DefaultMaxTokens = 16

// DefaultMaxInputSize limits a request body (Triton's --http-max-input-size
// default, which its OpenAI frontend shares).
const DefaultMaxInputSize = 64 << 20

// Options configures a Server. The zero value is usable.
type Options struct {
	// Logger receives the front end's logs; nil discards them.
	Logger hclog.Logger
	// Repositories are the model repository directories: a model's
	// directory there may hold a Hugging Face tokenizer_config.json with
	// its chat template, and a version directory a multi_lora.json.
	Repositories []string
	// LoraSeparator, when set, lets a request name "<model><sep><adapter>"
	// (--lora-separator).
	LoraSeparator string
	// DefaultMaxTokens is max_tokens when a request sets none (default
	// DefaultMaxTokens).
	DefaultMaxTokens int
	// ToolCallParser is "llama3", "mistral" or "" (tool calls in a
	// model's output are not parsed; requests with tools are refused).
	ToolCallParser string
	// ChatTemplate, when set, is a Jinja chat template used for every
	// model instead of the model's own (--chat-template).
	ChatTemplate string
	// MaxInputSize limits a request body (default DefaultMaxInputSize).
	MaxInputSize int64
	// ReadHeaderTimeout bounds how long a client may take to send request
	// headers (default 30s); BodyTimeout how long it may take to send the
	// body (default 60s). Responses have no limit.
	ReadHeaderTimeout, BodyTimeout time.Duration
	// Metrics, when set, is served at /metrics (the server's Prometheus
	// handler), so that the OpenAI port alone can be scraped as Triton's
	// OpenAI frontend can.
	Metrics http.Handler
	// Trace, when set, starts the trace of each model request a client
	// request makes (the server's --trace-config): submit is called with
	// the request just before the backend gets it, end once it is over.
	Trace func(r *http.Request, model string) (submit func(*backendapi.InferRequest), end func())
	// Admit, when set, is asked before each request is served with the
	// Triton API group the request belongs to ("inference" for
	// completions, chat and embeddings, "metadata" for the model list,
	// "health", "statistics" for /metrics) and a header getter; a non-empty
	// answer refuses the request with 403 and that message, so the
	// --http-restricted-api rules cover this port too.
	Admit func(group string, header func(name string) string) string
	// Engine is the HTTP server implementation (--http-engine); empty
	// means httpserve.NetHTTP.
	Engine httpserve.Engine
}

// Server serves the OpenAI API for one backend.
type Server struct {
	backend backendapi.Backend
	opts    Options
	log     hclog.Logger
	models  *catalog
	parser  toolParser
	tmpl    *chatTemplate // Options.ChatTemplate, compiled
	handler http.Handler
	http    *httpserve.Server
}

// ErrClosed is returned by Serve after Shutdown began.
var ErrClosed = errors.New("openai: server closed")

// New returns a Server for backend.
func New(backend backendapi.Backend, opts Options) (*Server, error) {
	if backend == nil {
		return nil, errors.New("openai: new: nil backend")
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.DefaultMaxTokens <= 0 {
		opts.DefaultMaxTokens = DefaultMaxTokens
	}
	if opts.MaxInputSize <= 0 {
		opts.MaxInputSize = DefaultMaxInputSize
	}
	if opts.ReadHeaderTimeout <= 0 {
		opts.ReadHeaderTimeout = 30 * time.Second
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = time.Minute
	}
	s := &Server{backend: backend, opts: opts, log: opts.Logger.Named("openai")}
	var err error
	if s.parser, err = newToolParser(opts.ToolCallParser); err != nil {
		return nil, fmt.Errorf("openai: new: %w", err)
	}
	if opts.ChatTemplate != "" {
		if s.tmpl, err = compileChatTemplate(opts.ChatTemplate, nil); err != nil {
			return nil, fmt.Errorf("openai: new: --chat-template: %w", err)
		}
	}
	s.models = newCatalog(backend, opts.Repositories, opts.LoraSeparator, s.log)
	s.handler = http.HandlerFunc(s.route)
	s.http, err = httpserve.New(s.handler, httpserve.Options{Engine: opts.Engine, HeaderTimeout: opts.ReadHeaderTimeout,
		BodyTimeout: opts.BodyTimeout, MaxBodySize: opts.MaxInputSize, Logger: opts.Logger, Streamed: streamedRoute})
	if err != nil {
		return nil, fmt.Errorf("openai: new: %w", err)
	}
	return s, nil
}

// Handler returns the handler of the OpenAI API.
func (s *Server) Handler() http.Handler { return s.handler }

// route dispatches by path; an unknown path is 404 and a known one with the
// wrong method 405, both as OpenAI error objects.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if !s.admit(w, r, p) {
		return
	}
	switch p {
	case "/v1/models":
		if allow(w, r, http.MethodGet) {
			s.handleListModels(w, r)
		}
		return
	case "/v1/completions":
		if allow(w, r, http.MethodPost) {
			s.handleCompletions(w, r)
		}
		return
	case "/v1/chat/completions":
		if allow(w, r, http.MethodPost) {
			s.handleChat(w, r)
		}
		return
	case "/v1/embeddings":
		if allow(w, r, http.MethodPost) {
			s.handleEmbeddings(w, r)
		}
		return
	case "/health/ready":
		if allow(w, r, http.MethodGet) {
			s.handleReady(w)
		}
		return
	case "/metrics":
		if s.opts.Metrics != nil {
			s.opts.Metrics.ServeHTTP(w, r)
			return
		}
	}
	if id, ok := strings.CutPrefix(p, "/v1/models/"); ok && id != "" {
		if allow(w, r, http.MethodGet) {
			s.handleGetModel(w, r, id)
		}
		return
	}
	writeError(w, &apiError{status: http.StatusNotFound, msg: "Not Found: " + p})
}

// admit answers 403 and returns false when Options.Admit refuses the group
// of path p.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, p string) bool {
	if s.opts.Admit == nil {
		return true
	}
	group := "inference"
	switch {
	case p == "/v1/models" || strings.HasPrefix(p, "/v1/models/"):
		group = "metadata"
	case p == "/health/ready":
		group = "health"
	case p == "/metrics":
		group = "statistics"
	}
	if msg := s.opts.Admit(group, r.Header.Get); msg != "" {
		writeError(w, &apiError{status: http.StatusForbidden, msg: msg})
		return false
	}
	return true
}

// allow answers 405 unless r uses method.
func allow(w http.ResponseWriter, r *http.Request, method string) bool {
	if r.Method == method {
		return true
	}
	w.Header().Set("Allow", method)
	writeError(w, &apiError{status: http.StatusMethodNotAllowed, msg: "Method Not Allowed: " + r.Method + " " + r.URL.Path})
	return false
}

// handleReady answers /health/ready: 200 when the server is ready, 400 as
// Triton's OpenAI frontend answers otherwise.
func (s *Server) handleReady(w http.ResponseWriter) {
	if s.backend.Ready() {
		w.WriteHeader(http.StatusOK)
		return
	}
	writeError(w, &apiError{status: http.StatusBadRequest, msg: "Attached inference engine is not ready for inference requests."})
}

// readBody reads and decodes a JSON request body into v, within the size
// limit and the body timeout.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, v any) error {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.opts.BodyTimeout))
	defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
	if r.ContentLength > s.opts.MaxInputSize {
		return &apiError{status: http.StatusRequestEntityTooLarge,
			msg: fmt.Sprintf("Request body of %d bytes exceeds the maximum allowed size of %d bytes", r.ContentLength, s.opts.MaxInputSize)}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxInputSize))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &apiError{status: http.StatusRequestEntityTooLarge,
				msg: fmt.Sprintf("Request body exceeds the maximum allowed size of %d bytes", s.opts.MaxInputSize)}
		}
		return badRequest("", "failed to read the request body: %v", err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return badRequest(te.Field, "'%s': expected %s, got JSON %s", te.Field, te.Type.Kind(), te.Value)
		}
		return badRequest("", "invalid JSON body: %v", err)
	}
	return nil
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"message":"could not encode the response","type":"server_error","param":null,"code":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// Serve serves the API on l until Shutdown; it returns nil after Shutdown.
func (s *Server) Serve(l net.Listener) error {
	err := s.http.Serve(l)
	if errors.Is(err, httpserve.ErrClosed) {
		return fmt.Errorf("openai: %w: %w", ErrClosed, err)
	}
	if err != nil {
		return fmt.Errorf("openai: %w", err)
	}
	return nil
}

// streamedRoute reports the routes whose replies may be server-sent
// events, flushed as they come: completions and chat completions (with
// "stream": true).
func streamedRoute(method, path string) bool {
	return method == http.MethodPost && (path == "/v1/completions" || path == "/v1/chat/completions")
}

// Shutdown stops the listeners and waits for requests in flight until ctx
// ends, then closes the connections left. It is idempotent.
func (s *Server) Shutdown(ctx context.Context) error {
	if err := s.http.Shutdown(ctx); err != nil {
		return fmt.Errorf("openai: shutdown: %w", err)
	}
	return nil
}
