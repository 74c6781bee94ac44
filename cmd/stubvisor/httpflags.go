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

// register adds --http-engine and --http-header-timeout to fs.
func (h *httpFlags) register(fs *flag.FlagSet) {
	h.engine = httpserve.NetHTTP
	fs.Func("http-engine", "HTTP server implementation of the HTTP, metrics and OpenAI ports: net/http (default) or fasthttp (less CPU per request; see docs/compatibility.md)", func(v string) error {
		e, err := httpserve.ParseEngine(v)
		h.engine = e
		return err
	})
	fs.DurationVar(&h.headerTimeout, "http-header-timeout", 30*time.Second, "how long an HTTP client may take to send a request's headers, from their first byte")
}
