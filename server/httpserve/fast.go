package httpserve

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// readBufferSize bounds a request's header block under fasthttp (its
// default, 4 KiB, is smaller than some clients' trace and forwarded
// headers; net/http allows 1 MiB).
const readBufferSize = 64 << 10

// fastEngine serves with fasthttp. A request whose reply is not streamed
// (Options.Streamed) runs the handler on the connection's goroutine over a
// net/http view of the request (bridge); a streamed one goes through
// fasthttpadaptor, which runs the handler on a goroutine of its own and
// pipes what it flushes to the connection. fasthttpadaptor costs more per
// request than net/http does (a goroutine and a pipe per request; about
// twice net/http's latency in BenchmarkEngines), so only the routes that
// flush go through it. A bridged reply is buffered whole until the handler
// returns; what the handler writes through KeepWriter (keep.go) is kept
// where it is instead, until it is written.
type fastEngine struct {
	srv     *fasthttp.Server
	opts    *Options
	h       http.Handler
	adapted fasthttp.RequestHandler
	log     hclog.Logger
	ln      *trackListener
}

func newFastEngine(h http.Handler, o *Options, l net.Listener) *fastEngine {
	e := &fastEngine{opts: o, h: h, log: o.Logger, ln: newTrackListener(l)}
	e.adapted = fasthttpadaptor.NewFastHTTPHandler(http.HandlerFunc(e.serveAdapted))
	bodyTTL := o.BodyTimeout
	e.srv = &fasthttp.Server{
		Handler: e.handle,
		// The header deadline runs from a request's first byte; once the
		// headers are in, the body deadline replaces it for the part of the
		// body fasthttp reads ahead (at most 8 KiB), and the reads of the
		// rest push it back as they make progress (progressReader, and the
		// handler's own through bridgeWriter.SetReadDeadline).
		ReadTimeout: o.HeaderTimeout,
		IdleTimeout: o.IdleTimeout,
		HeaderReceived: func(*fasthttp.RequestHeader) fasthttp.RequestConfig {
			return fasthttp.RequestConfig{ReadTimeout: bodyTTL}
		},
		StreamRequestBody:            true,
		MaxRequestBodySize:           int(min(o.MaxBodySize, 1<<40)),
		ReadBufferSize:               readBufferSize,
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		DisablePreParseMultipartForm: true,
		CloseOnShutdown:              true,
		Logger:                       o.Logger.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
	return e
}

func (e *fastEngine) serve() error { return e.srv.Serve(e.ln) }

// shutdown closes the listener itself too: fasthttp only closes the
// listeners its Serve has registered, and a Shutdown may come first.
func (e *fastEngine) shutdown(ctx context.Context) error {
	err := e.srv.ShutdownWithContext(ctx)
	_ = e.ln.Close()
	return err
}

func (e *fastEngine) close() { e.ln.closeAll() }

// handle serves one request.
func (e *fastEngine) handle(ctx *fasthttp.RequestCtx) {
	if s := e.opts.Streamed; s != nil && s(string(ctx.Method()), string(ctx.Path())) {
		if !e.readWhole(ctx) {
			return
		}
		e.adapted(ctx)
		return
	}
	e.bridge(ctx)
}

// readWhole reads a streamed route's body before fasthttpadaptor runs the
// handler (the adaptor reads it whole anyway, but with no progress bound
// and no size bound): each read must return within the body timeout, and
// the body is cut after MaxBodySize+1 bytes. False means the body failed
// and the connection is closed.
func (e *fastEngine) readWhole(ctx *fasthttp.RequestCtx) bool {
	s := ctx.RequestBodyStream()
	if s == nil {
		return true
	}
	var buf bytes.Buffer
	_, err := buf.ReadFrom(io.LimitReader(&progressReader{r: s, c: ctx.Conn(), ttl: e.opts.BodyTimeout}, e.opts.MaxBodySize+1))
	if err != nil {
		ctx.SetConnectionClose()
		ctx.Error("failed to read the request body: "+err.Error(), http.StatusBadRequest)
		return false
	}
	_ = ctx.Conn().SetReadDeadline(time.Time{})
	ctx.Request.SetBody(buf.Bytes())
	return true
}

// serveAdapted is the handler of the streamed routes under fasthttpadaptor:
// it gives the request a context that ends when the client hangs up.
func (e *fastEngine) serveAdapted(w http.ResponseWriter, r *http.Request) {
	rc, _ := r.Context().(*fasthttp.RequestCtx)
	// The adaptor's context is the RequestCtx, which ends when a shutdown
	// begins; a request in flight is let finish, as under net/http.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if rc != nil {
		if c := connOf(rc.Conn()); c != nil {
			c.watch(cancel)
			defer c.unwatch()
		}
	}
	bw := &bufferedWriter{ResponseWriter: w}
	bw.buf = bufio.NewWriterSize(writerFunc(w.Write), streamBufferSize)
	defer func() { _ = bw.buf.Flush() }()
	e.h.ServeHTTP(bw, r.WithContext(ctx))
}

// streamBufferSize is what a streamed reply gathers before it goes to the
// connection when the handler does not flush first. fasthttpadaptor sends
// each Write after a Flush as a chunk of its own, and hands it over to the
// connection's goroutine; net/http gathers 2 KiB, so a handler that
// writes an event in three calls gets one chunk per event or more.
const streamBufferSize = 4 << 10

// bufferedWriter gathers a streamed reply's writes until Flush or
// streamBufferSize.
type bufferedWriter struct {
	http.ResponseWriter
	buf *bufio.Writer
}

func (w *bufferedWriter) Write(p []byte) (int, error) { return w.buf.Write(p) }

func (w *bufferedWriter) Flush() {
	_ = w.buf.Flush()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the adaptor's writer.
func (w *bufferedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// progressReader reads a body with a read deadline pushed back before each
// read: a body may take any time as long as no pause lasts ttl.
type progressReader struct {
	r   io.Reader
	c   net.Conn
	ttl time.Duration
}

func (p *progressReader) Read(b []byte) (int, error) {
	_ = p.c.SetReadDeadline(time.Now().Add(p.ttl))
	return p.r.Read(b)
}

// bridge runs the handler on the connection's goroutine with a net/http
// view of the request; the reply is buffered and written once the handler
// returns (so it cannot be flushed early: such routes are Streamed).
func (e *fastEngine) bridge(ctx *fasthttp.RequestCtx) {
	reqCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := connOf(ctx.Conn())
	br := &bridgeReq{}
	var zero http.Request
	br.req = *zero.WithContext(reqCtx) // the one way to set a context
	r, b := &br.req, &br.body
	*b = bridgeBody{conn: c, hangup: cancel}
	r.Method = methodString(ctx.Method())
	r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/1.1", 1, 1
	r.TLS = ctx.TLSConnectionState()
	r.Body = b
	if c != nil {
		r.Host = interned(&c.lastHost, ctx.Host())
		r.RemoteAddr = c.remoteAddr()
		r.RequestURI = interned(&c.lastURI, ctx.RequestURI())
	} else {
		r.Host = string(ctx.Host())
		r.RemoteAddr = ctx.RemoteAddr().String()
		r.RequestURI = string(ctx.RequestURI())
	}
	if !ctx.Request.Header.IsHTTP11() {
		r.Proto, r.ProtoMinor = "HTTP/1.0", 0
	}
	if err := parseRequestURI(r.RequestURI, &br.url); err != nil {
		ctx.Error("Bad Request: "+err.Error(), http.StatusBadRequest)
		return
	}
	r.URL = &br.url
	r.Header = make(http.Header, 8)
	i := 0
	for k, v := range ctx.Request.Header.All() {
		switch string(k) {
		case "Host", "Transfer-Encoding", "Trailer":
			continue
		}
		key := headerKey(k)
		val := c.headerValue(i, v)
		if vs, ok := r.Header[key]; ok {
			r.Header[key] = append(vs, val)
		} else if i < bridgeHeaders {
			br.vals[i] = val
			r.Header[key] = br.vals[i : i+1 : i+1]
		} else {
			r.Header[key] = []string{val}
		}
		i++
	}
	switch n := ctx.Request.Header.ContentLength(); {
	case n == -1: // chunked
		r.ContentLength = -1
		r.TransferEncoding = []string{"chunked"}
		b.left = -1
	case n > 0:
		r.ContentLength = int64(n)
		b.left = int64(n)
	}
	if b.left != 0 {
		b.src = ctx.RequestBodyStream()
		if b.src == nil {
			br.rd.Reset(ctx.Request.Body())
			b.src = &br.rd
		}
	} else {
		r.Body = http.NoBody
		if c != nil {
			c.watch(cancel)
		}
	}
	if c != nil {
		defer c.unwatch()
	}
	w := &br.w
	*w = bridgeWriter{ctx: ctx, h: make(http.Header, 4)}
	defer e.recoverHandler(ctx, r, w)
	e.h.ServeHTTP(w, r)
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if k := w.kept; k != nil {
		// fasthttp writes it after this returns and then closes it, or
		// closes it when the response is reset unwritten.
		w.kept = nil
		ctx.Response.SetBodyStream(k, k.size)
	}
}

// headerKey returns a request header's name as a string, without a copy
// for the common ones (as net/http does).
func headerKey(k []byte) string {
	switch string(k) {
	case "Accept":
		return "Accept"
	case "Accept-Encoding":
		return "Accept-Encoding"
	case "Connection":
		return "Connection"
	case "Content-Encoding":
		return "Content-Encoding"
	case "Content-Length":
		return "Content-Length"
	case "Content-Type":
		return "Content-Type"
	case "Expect":
		return "Expect"
	case "Inference-Header-Content-Length":
		return "Inference-Header-Content-Length"
	case "Traceparent":
		return "Traceparent"
	case "User-Agent":
		return "User-Agent"
	}
	return string(k)
}

// recoverHandler does what net/http does with a handler that panics: log
// it (unless it is http.ErrAbortHandler) and drop the connection without a
// reply.
func (e *fastEngine) recoverHandler(ctx *fasthttp.RequestCtx, r *http.Request, w *bridgeWriter) {
	rec := recover()
	if rec == nil {
		return
	}
	if w.kept != nil {
		_ = w.kept.Close()
		w.kept = nil
	}
	if rec != http.ErrAbortHandler {
		e.log.Error("http: panic serving request", "method", r.Method, "uri", r.RequestURI, "panic", rec, "stack", string(debug.Stack()))
	}
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) { _ = c.Close() })
}

// bridgeBody is a bridged request's body. Like net/http's, it reports EOF
// with the last byte of a body of known length, and once the body is read
// the connection is watched for the client hanging up.
type bridgeBody struct {
	src    io.Reader
	left   int64 // bytes to come; -1 for a chunked body
	conn   *conn
	hangup func()
	err    error
}

func (b *bridgeBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.left == 0 || b.src == nil {
		return 0, io.EOF
	}
	if b.left > 0 && int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.src.Read(p)
	if b.left > 0 {
		b.left -= int64(n)
		if b.left == 0 {
			err = io.EOF
		} else if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
	}
	switch {
	case err == io.EOF:
		b.left = 0
		if b.conn != nil {
			b.conn.watch(b.hangup)
		}
	case err != nil:
		b.err = err
	}
	return n, err
}

func (b *bridgeBody) Close() error { return nil }

// bridgeWriter is a bridged request's http.ResponseWriter: the status and
// headers go to fasthttp's response at WriteHeader, the body into its
// buffer, or into kept once the handler asked for a KeepWriter. Read
// deadlines reach the connection (http.ResponseController), which is how a
// handler bounds a stalled body.
type bridgeWriter struct {
	ctx   *fasthttp.RequestCtx
	h     http.Header
	wrote bool
	kept  *keptBody
}

func (w *bridgeWriter) Header() http.Header { return w.h }

func (w *bridgeWriter) WriteHeader(code int) {
	if w.wrote || code < 200 && code != http.StatusSwitchingProtocols {
		return // a second call, or an interim reply (not sent, as RFC 9110 allows)
	}
	w.wrote = true
	w.ctx.SetStatusCode(code)
	rh := &w.ctx.Response.Header
	for k, vs := range w.h {
		if k == "Content-Length" {
			continue // fasthttp writes the length of the buffered body
		}
		for i, v := range vs {
			if i == 0 {
				rh.Set(k, v)
			} else {
				rh.Add(k, v)
			}
		}
	}
}

func (w *bridgeWriter) Write(p []byte) (int, error) {
	w.start(p)
	if w.kept != nil {
		w.kept.copyIn(p)
		return len(p), nil
	}
	return w.ctx.Write(p)
}

// start sends the headers before the first write of the body, p, as
// net/http does: with a Content-Type sniffed from p when none was set.
func (w *bridgeWriter) start(p []byte) {
	if !w.wrote {
		if _, ok := w.h["Content-Type"]; !ok && len(p) > 0 {
			w.h.Set("Content-Type", http.DetectContentType(p))
		}
		w.WriteHeader(http.StatusOK)
	}
}

// SetReadDeadline is http.ResponseController's hook for the body timeout.
func (w *bridgeWriter) SetReadDeadline(t time.Time) error { return w.ctx.Conn().SetReadDeadline(t) }

// SetWriteDeadline is http.ResponseController's write deadline hook.
func (w *bridgeWriter) SetWriteDeadline(t time.Time) error { return w.ctx.Conn().SetWriteDeadline(t) }
