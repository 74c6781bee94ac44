package main

import (
	"flag"
	"time"

	"github.com/stubvisor/stubvisor/server/httpserve"
)

// httpFlags choose how the HTTP ports (HTTP, metrics, OpenAI) are served.
type httpFlags struct {
	engine        httpserve.Engine
	headerTimeout time.Duration
}

// register adds --http-engine, --http-header-timeout and
// --http-header-forward-pattern (into forward) to fs.
func (h *httpFlags) register(fs *flag.FlagSet, forward *string) {
	// fasthttp by default: it costs less CPU and fewer wake-ups per small
	// request than net/http, and writes large binary outputs from the
	// stub's memory as net/http does (docs/performance.md, round 6).
	h.engine = httpserve.FastHTTP
	fs.Func("http-engine", "HTTP server implementation of the HTTP, metrics and OpenAI ports: fasthttp (default) or net/http (Go's own; see docs/compatibility.md)", func(v string) error {
		e, err := httpserve.ParseEngine(v)
		h.engine = e
		return err
	})
	fs.StringVar(forward, "http-header-forward-pattern", "", "forward the HTTP request headers whose names match this regular expression (case-insensitive) to the model as request parameters")
	fs.DurationVar(&h.headerTimeout, "http-header-timeout", 30*time.Second, "how long an HTTP client may take to send a request's headers, from their first byte")
}
