package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/server/httpserve"
	"github.com/stubvisor/stubvisor/server/trace"
)

// serverName is what server metadata reports. Triton's clients and tests
// check for exactly this name, so it is Triton's, not ours.
const serverName = "triton"

// DefaultMaxInputSize is the default limit on an HTTP request body
// (Triton's --http-max-input-size default).
const DefaultMaxInputSize = 64 << 20

// defaultExtensions lists, in Triton's order, the protocol extensions this
// front end implements. Whoever builds the server decides what to report
// (Options.Extensions); a backend that does not support one of them should
// leave it out.
var defaultExtensions = []string{
	"classification",
	"sequence",
	"model_repository",
	"model_repository(unload_dependents)",
	"schedule_policy",
	"model_configuration",
	"system_shared_memory",
	"cuda_shared_memory",
	"binary_tensor_data",
	"parameters",
	"statistics",
	"trace",
	"logging",
	"generate",
}

// Options configures a Server. The zero value is usable.
type Options struct {
	// Version is the server version that server metadata reports; empty
	// means "0.1.0".
	Version string
	// Extensions are the extensions server metadata lists; nil means
	// every extension this server implements, in Triton's order.
	Extensions []string
	// MaxInputSize limits the size of an HTTP request body, after
	// decompression (default DefaultMaxInputSize).
	MaxInputSize int64
	// Logger receives the front end's own logs. It is also the logger
	// whose level the logging extension (/v2/logging) reads and sets, so
	// pass the root logger of the process. Nil discards logs.
	Logger hclog.Logger
	// ReadHeaderTimeout bounds how long a client may take to send request
	// headers (default 30s); there is no limit on inference.
	ReadHeaderTimeout time.Duration
	// BodyTimeout is how long a client may pause while sending a request
	// body (default DefaultBodyTimeout): a stalled body ends the
	// connection, however large the body, as long as it keeps coming.
	BodyTimeout time.Duration
	// MaxInflightBytes is the budget of request bytes held by requests in
	// flight, HTTP bodies and gRPC messages together (default
	// DefaultMaxInflightBytes); a request over it is refused with 503 or
	// RESOURCE_EXHAUSTED. A gRPC server built with this Server as its HTTP
	// option shares the budget.
	MaxInflightBytes int64
	// BackendTimeout bounds the backend calls made at scrape time by the
	// metrics handler (default 5s).
	BackendTimeout time.Duration
	// HeaderForwardPattern, when set, forwards the infer request headers
	// whose names it matches to the model as string parameters
	// (--http-header-forward-pattern): a regular expression matched as Triton
	// does, in part and case-insensitively unless it says (?-i).
	HeaderForwardPattern string
	// Trace is the tracing configuration (--trace-config); nil means
	// DefaultTraceConfig, tracing off. The gRPC front end given this
	// server shares its settings.
	Trace *TraceConfig
	// Restrictions puts API groups behind headers
	// (--http-restricted-api); nil restricts nothing.
	Restrictions *Restrictions
	// Engine is the HTTP server implementation (--http-engine); empty
	// means httpserve.NetHTTP.
	Engine httpserve.Engine
}

// defaultVersion is the version reported when Options.Version is empty.
const defaultVersion = "0.1.0"

// Server serves a backendapi.Backend over HTTP: the KServe v2 API, the
// status page and, on its own handler, Prometheus metrics.
type Server struct {
	backend   backendapi.Backend
	forward   *regexp.Regexp // header forward pattern, or nil
	log       hclog.Logger
	maxInput  int64
	metadata  []byte // the GET /v2 reply, built once
	logging   *logSettings
	tracer    *trace.Tracer
	api       http.Handler
	metrics   http.Handler
	headerTTL time.Duration
	bodyTTL   time.Duration
	budget    *byteBudget
	restrict  *Restrictions

	apiHTTP     *httpserve.Server // serves api
	metricsHTTP *httpserve.Server // serves metrics
}

// New returns a Server for backend.
func New(backend backendapi.Backend, opts Options) (*Server, error) {
	if backend == nil {
		return nil, errors.New("server: new: nil backend")
	}
	if opts.Version == "" {
		opts.Version = defaultVersion
	}
	if opts.Extensions == nil {
		opts.Extensions = defaultExtensions
	}
	if opts.MaxInputSize <= 0 {
		opts.MaxInputSize = DefaultMaxInputSize
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.ReadHeaderTimeout <= 0 {
		opts.ReadHeaderTimeout = 30 * time.Second
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	if opts.BackendTimeout <= 0 {
		opts.BackendTimeout = 5 * time.Second
	}
	md, err := json.Marshal(struct {
		Name       string   `json:"name"`
		Version    string   `json:"version"`
		Extensions []string `json:"extensions"`
	}{serverName, opts.Version, opts.Extensions})
	if err != nil {
		return nil, fmt.Errorf("server: new: server metadata: %w", err)
	}
	forward, err := compileForwardPattern(opts.HeaderForwardPattern)
	if err != nil {
		return nil, err
	}
	tc := DefaultTraceConfig()
	if opts.Trace != nil {
		tc = *opts.Trace
	}
	tr, err := trace.New(tc, opts.Logger, traceJSON{})
	if err != nil {
		return nil, fmt.Errorf("server: new: %w", err)
	}
	s := &Server{
		forward:   forward,
		tracer:    tr,
		backend:   backend,
		log:       opts.Logger,
		maxInput:  opts.MaxInputSize,
		metadata:  md,
		logging:   newLogSettings(opts.Logger),
		headerTTL: opts.ReadHeaderTimeout,
		bodyTTL:   opts.BodyTimeout,
		budget:    newByteBudget(opts.MaxInflightBytes),
		restrict:  opts.Restrictions,
	}
	s.api = http.HandlerFunc(s.route)
	s.metrics = newMetricsHandler(backend, opts.BackendTimeout, opts.Logger)
	hopts := httpserve.Options{Engine: opts.Engine, HeaderTimeout: opts.ReadHeaderTimeout, BodyTimeout: opts.BodyTimeout,
		MaxBodySize: opts.MaxInputSize, Logger: opts.Logger, Streamed: streamedRoute}
	if s.apiHTTP, err = httpserve.New(s.api, hopts); err != nil {
		return nil, fmt.Errorf("server: new: %w", err)
	}
	hopts.Streamed = nil
	if s.metricsHTTP, err = httpserve.New(s.metrics, hopts); err != nil {
		return nil, fmt.Errorf("server: new: %w", err)
	}
	return s, nil
}

// HTTPHandler returns the handler of the HTTP/REST API (KServe v2, Triton
// extensions, stub status JSON and the status page at /).
func (s *Server) HTTPHandler() http.Handler { return s.api }

// MetricsHandler returns the handler of the metrics port: Prometheus text
// at /metrics.
func (s *Server) MetricsHandler() http.Handler { return s.metrics }

// Serve serves the HTTP/REST API on l until Shutdown. It returns nil after
// a Shutdown.
func (s *Server) Serve(l net.Listener) error { return serveErr(s.apiHTTP.Serve(l)) }

// ServeMetrics serves the metrics handler on l until Shutdown. It returns
// nil after a Shutdown.
func (s *Server) ServeMetrics(l net.Listener) error { return serveErr(s.metricsHTTP.Serve(l)) }

// ErrClosed is returned by Serve and ServeMetrics after Shutdown began.
var ErrClosed = errors.New("server closed")

func serveErr(err error) error {
	if errors.Is(err, httpserve.ErrClosed) {
		return fmt.Errorf("server: %w: %w", ErrClosed, err)
	}
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	return nil
}

// streamedRoute reports the routes whose replies are flushed while they
// run (server-sent events): generate_stream.
func streamedRoute(method, path string) bool {
	return method == http.MethodPost && strings.HasSuffix(path, "/generate_stream")
}

// Shutdown stops every listener, then waits for in-flight requests until
// ctx is done, after which it closes the remaining connections.
func (s *Server) Shutdown(ctx context.Context) error {
	errs := []error{s.apiHTTP.Shutdown(ctx), s.metricsHTTP.Shutdown(ctx)}
	// Requests are over: write what the trace files hold, flush spans.
	s.tracer.Close()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("server: shutdown: %w", err)
	}
	return nil
}

// TraceConfig is the tracing configuration given at start (package trace).
type TraceConfig = trace.Config

// DefaultTraceConfig is Triton's default: level OFF, rate 1000, count -1.
func DefaultTraceConfig() TraceConfig { return trace.DefaultConfig() }
