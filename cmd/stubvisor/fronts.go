package main

import (
	"context"
	"net"
	"sync"

	"github.com/hashicorp/go-hclog"

	frontend "github.com/stubvisor/stubvisor/server"
	"github.com/stubvisor/stubvisor/server/openai"
)

// frontEnds are the server's front ends: HTTP (with metrics), gRPC and the
// OpenAI API.
type frontEnds struct {
	http   *frontend.Server
	grpc   *frontend.GRPCServer
	openai *openai.Server
	secure *listenerTLS
}

// newFrontEnds builds every front end over sup, the supervisor whose
// readiness turns false when a shutdown begins (drain.go).
func newFrontEnds(c *config, sup *drainBackend, log hclog.Logger) (*frontEnds, error) {
	secure, err := c.tls.build(log)
	if err != nil {
		return nil, err
	}
	keep, err := c.keepalive.options()
	if err != nil {
		return nil, err
	}
	srv, err := frontend.New(sup, frontend.Options{Version: version, MaxInputSize: c.maxInputSize, BodyTimeout: c.bodyTimeout,
		MaxInflightBytes: c.maxInflight, Logger: log, HeaderForwardPattern: c.httpForward, Trace: &c.trace,
		Restrictions: c.httpRestrict, Engine: c.http.engine, ReadHeaderTimeout: c.http.headerTimeout})
	if err != nil {
		return nil, err
	}
	grpcSrv, err := frontend.NewGRPC(sup, frontend.GRPCOptions{Version: version, Logger: log, HTTP: srv, HeaderForwardPattern: c.grpcForward,
		MaxMessageSize: c.maxGRPCMessage, BodyTimeout: c.bodyTimeout, Restrictions: c.grpcRestrict, ServerOptions: append(keep, secure.grpc...)})
	if err != nil {
		return nil, err
	}
	// The OpenAI API shares the metrics handler, the tracer and the body
	// limits of the HTTP front end.
	o := c.openai
	o.Logger, o.Repositories, o.Metrics, o.Trace = log, c.repos, srv.MetricsHandler(), srv.TraceHTTP
	o.MaxInputSize, o.BodyTimeout = c.maxInputSize, c.bodyTimeout
	o.Engine, o.ReadHeaderTimeout = c.http.engine, c.http.headerTimeout
	// It is an HTTP port: --http-restricted-api and the HTTP listener's
	// TLS settings hold there too, so it is no side door around them.
	o.Admit = c.httpRestrict.Refusal
	oaiSrv, err := openai.New(sup, o)
	if err != nil {
		return nil, err
	}
	return &frontEnds{http: srv, grpc: grpcSrv, openai: oaiSrv, secure: secure}, nil
}

// services lists the listeners, by the flags' ports.
func (f *frontEnds) services(c *config) []service {
	return []service{
		{"HTTP", c.httpPort, func(l net.Listener) error { return f.http.Serve(wrap(l, f.secure.http)) }, f.secure.http != nil},
		{"gRPC", c.grpcPort, f.grpc.Serve, f.secure.grpc != nil},
		{"metrics", c.metricsPort, func(l net.Listener) error { return f.http.ServeMetrics(wrap(l, f.secure.metrics)) }, f.secure.metrics != nil},
		{"OpenAI", c.openaiPort, func(l net.Listener) error { return f.openai.Serve(wrap(l, f.secure.http)) }, f.secure.http != nil},
	}
}

// stop closes every front end at once (a listener failed to open).
func (f *frontEnds) stop() {
	_ = f.http.Shutdown(context.Background())
	_ = f.openai.Shutdown(context.Background())
	f.grpc.Stop()
}

// shutdown stops accepting and waits for the requests in flight until ctx
// ends; wg is done when every front end has stopped.
func (f *frontEnds) shutdown(ctx context.Context, log hclog.Logger, wg *sync.WaitGroup) {
	wg.Add(3)
	go func() { defer wg.Done(); f.grpc.GracefulStop(ctx) }()
	go func() {
		defer wg.Done()
		if err := f.openai.Shutdown(ctx); err != nil {
			log.Warn("OpenAI shutdown", "error", err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := f.http.Shutdown(ctx); err != nil {
			log.Warn("HTTP shutdown", "error", err)
		}
	}()
}
