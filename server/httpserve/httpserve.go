// Package httpserve serves an http.Handler on listeners with one of two
// HTTP/1.1 engines: Go's net/http, or github.com/valyala/fasthttp, which
// costs less CPU per request. It is the one place that knows which engine
// runs, so the rest of the project writes plain net/http handlers and the
// choice can change without touching them.
//
// Both engines keep the same contract: a bound on how long request headers
// may take, a progress bound on request bodies (a body that stops arriving
// for the body timeout ends the connection, one that keeps coming does not),
// chunked bodies, Expect: 100-continue, keep-alive, a request context that
// ends when the client hangs up, http.Flusher for streamed replies, and a
// graceful Shutdown that lets requests in flight finish.
package httpserve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Engine names an HTTP server implementation.
type Engine string

const (
	// NetHTTP is Go's net/http server.
	NetHTTP Engine = "net/http"
	// FastHTTP is github.com/valyala/fasthttp: a request runs on the
	// connection's goroutine and the handler sees a net/http view of it
	// (fast.go).
	FastHTTP Engine = "fasthttp"
)

// Engines lists the engines ParseEngine accepts, the default first.
var Engines = []Engine{NetHTTP, FastHTTP}

// ErrUnknownEngine is ParseEngine's error for a name it does not know.
var ErrUnknownEngine = errors.New("unknown HTTP engine")

// ParseEngine returns the engine called name; "" is the default, NetHTTP.
func ParseEngine(name string) (Engine, error) {
	if name == "" {
		return NetHTTP, nil
	}
	for _, e := range Engines {
		if string(e) == name {
			return e, nil
		}
	}
	return "", fmt.Errorf("httpserve: %q: %w (want net/http or fasthttp)", name, ErrUnknownEngine)
}

// Options configures a Server. The zero value serves with net/http and
// the defaults below.
type Options struct {
	// Engine is the server implementation (default NetHTTP).
	Engine Engine
	// HeaderTimeout bounds how long a client may take to send a request's
	// headers, from its first byte (default 30s).
	HeaderTimeout time.Duration
	// BodyTimeout is how long a client may pause while sending a request
	// body (default 30s). Under net/http the handler enforces it (it sets
	// read deadlines through http.ResponseController as it reads); the
	// fasthttp engine enforces it itself for the bodies it reads before
	// the handler runs (the streamed routes) and lets the handler's
	// deadlines through for the others.
	BodyTimeout time.Duration
	// IdleTimeout is how long a keep-alive connection may wait for its
	// next request (default 2 minutes).
	IdleTimeout time.Duration
	// MaxBodySize bounds the bodies the fasthttp engine reads whole before
	// a streamed route's handler runs (default 64 MiB). A longer body is
	// cut after MaxBodySize+1 bytes, so that the handler's own limit
	// check refuses it.
	MaxBodySize int64
	// Streamed reports whether a request's reply may be flushed while the
	// handler runs (http.Flusher), for the fasthttp engine: those requests
	// run through fasthttpadaptor, on a goroutine of their own; the
	// others run on the connection's goroutine with their replies
	// buffered. Nil means none. net/http streams every request.
	Streamed func(method, path string) bool
	// Logger receives the engine's own errors; nil discards them.
	Logger hclog.Logger
}

func (o *Options) defaults() {
	if o.Engine == "" {
		o.Engine = NetHTTP
	}
	if o.HeaderTimeout <= 0 {
		o.HeaderTimeout = 30 * time.Second
	}
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = 30 * time.Second
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 2 * time.Minute
	}
	if o.MaxBodySize <= 0 {
		o.MaxBodySize = 64 << 20
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
}

// ErrClosed is returned by Serve once Shutdown began.
var ErrClosed = errors.New("http server closed")

// engine is one listener's server.
type engine interface {
	serve() error // nil once shut down
	shutdown(ctx context.Context) error
	close()
}

// Server serves one handler on any number of listeners.
type Server struct {
	handler http.Handler
	opts    Options

	mu      sync.Mutex
	running []engine
	closed  bool
}

// New returns a Server of h.
func New(h http.Handler, opts Options) (*Server, error) {
	opts.defaults()
	if _, err := ParseEngine(string(opts.Engine)); err != nil {
		return nil, err
	}
	return &Server{handler: h, opts: opts}, nil
}

// Engine reports the engine the server runs.
func (s *Server) Engine() Engine { return s.opts.Engine }

// Serve serves l until Shutdown, then returns nil; l is closed when it
// returns.
func (s *Server) Serve(l net.Listener) error {
	var e engine
	if s.opts.Engine == FastHTTP {
		e = newFastEngine(s.handler, &s.opts, l)
	} else {
		e = newNetEngine(s.handler, &s.opts, l)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = l.Close()
		return fmt.Errorf("httpserve: serve %s: %w", l.Addr(), ErrClosed)
	}
	s.running = append(s.running, e)
	s.mu.Unlock()
	if err := e.serve(); err != nil {
		return fmt.Errorf("httpserve: serve %s: %w", l.Addr(), err)
	}
	return nil
}

// Shutdown stops every listener and waits for the requests in flight until
// ctx ends, after which it closes the connections left. It is idempotent.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	running := s.running
	s.running = nil
	s.mu.Unlock()
	var errs []error
	for _, e := range running {
		if err := e.shutdown(ctx); err != nil {
			errs = append(errs, err)
			e.close()
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("httpserve: shutdown: %w", err)
	}
	return nil
}

// netEngine is net/http's server.
type netEngine struct {
	hs *http.Server
	l  net.Listener
}

func newNetEngine(h http.Handler, o *Options, l net.Listener) *netEngine {
	return &netEngine{l: l, hs: &http.Server{
		Handler:           h,
		ReadHeaderTimeout: o.HeaderTimeout,
		IdleTimeout:       o.IdleTimeout,
		ErrorLog:          o.Logger.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}}
}

func (e *netEngine) serve() error {
	if err := e.hs.Serve(e.l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (e *netEngine) shutdown(ctx context.Context) error { return e.hs.Shutdown(ctx) }
func (e *netEngine) close()                             { _ = e.hs.Close() }
