package server

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/tap"
)

// DefaultBodyTimeout is how long a client may send nothing of a request
// body it started before the server gives up on it (as long as
// ReadHeaderTimeout allows for the headers).
const DefaultBodyTimeout = 30 * time.Second

// stallGuard bounds the reads of an HTTP request body by progress: each
// read must return within the timeout, so a client that stops sending a
// body is cut off, while one that keeps sending, however large the body,
// is not. The deadline is cleared as soon as the body ends (net/http then
// reads the connection in the background to notice a client that leaves,
// and a stale deadline there would cancel the request), and by done.
type stallGuard struct {
	body    io.ReadCloser
	rc      http.ResponseController
	timeout time.Duration
	armedAt time.Time // when the deadline was last pushed back; zero when cleared
}

// guardPool holds stallGuards between requests: a handler may not read
// the body once it returned, so the guard is free again then (end).
var guardPool = sync.Pool{New: func() any { return new(stallGuard) }}

// guardBody makes r's body a stallGuard when the request has one. The
// caller calls end when the handler returned.
func guardBody(w http.ResponseWriter, r *http.Request, timeout time.Duration) *stallGuard {
	if timeout <= 0 || r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil
	}
	g := guardPool.Get().(*stallGuard)
	*g = stallGuard{body: r.Body, rc: *http.NewResponseController(w), timeout: timeout}
	r.Body = g
	return g
}

func (g *stallGuard) Read(p []byte) (int, error) {
	// Pushing the deadline back costs a timer update: do it when a quarter
	// of the timeout has passed, not on every read.
	if now := time.Now(); g.armedAt.IsZero() || now.Sub(g.armedAt) > g.timeout/4 {
		if g.rc.SetReadDeadline(now.Add(g.timeout)) == nil {
			g.armedAt = now
		}
	}
	n, err := g.body.Read(p)
	if err == io.EOF {
		g.done()
	} else if err != nil {
		// The body failed (stalled, most likely): leave the deadline
		// passed, so that net/http's attempt to discard the rest fails at
		// once and the connection is closed.
		g.armedAt = time.Time{}
	}
	return n, err
}

func (g *stallGuard) Close() error { return g.body.Close() }

// done clears the deadline if it is set.
func (g *stallGuard) done() {
	if g != nil && !g.armedAt.IsZero() {
		_ = g.rc.SetReadDeadline(time.Time{})
		g.armedAt = time.Time{}
	}
}

// end is done once the handler returned, and puts the guard back.
func (g *stallGuard) end() {
	if g == nil {
		return
	}
	g.done()
	*g = stallGuard{}
	guardPool.Put(g)
}

// grpcBodyRate is the slowest transfer a gRPC request message may have:
// gRPC shows the server a message only once it has all arrived, so its
// bound is the body timeout plus the largest message at this rate.
const grpcBodyRate = 8 << 20 // bytes per second

// grpcBodyBound is how long a unary RPC's request message may take to
// arrive after its headers.
func grpcBodyBound(timeout time.Duration, maxMsg int) time.Duration {
	return timeout + time.Duration(float64(maxMsg)/grpcBodyRate*float64(time.Second))
}

// grpcStall bounds how long the request message of a unary RPC may take to
// arrive: the tap handle (which sees each stream's headers, and whose
// context the transport's reads wait on) starts a timer that cancels the
// stream, and a unary interceptor (which runs once the message is in)
// stops it. Streaming RPCs are left alone: a stream may rightly stay quiet
// between messages.
type grpcStall struct {
	bound time.Duration
	unary map[string]bool // full method names
}

type stallTimerKey struct{}

func newGRPCStall(bound time.Duration, services ...*grpc.ServiceDesc) *grpcStall {
	g := &grpcStall{bound: bound, unary: map[string]bool{}}
	for _, sd := range services {
		for _, m := range sd.Methods {
			g.unary["/"+sd.ServiceName+"/"+m.MethodName] = true
		}
	}
	return g
}

func (g *grpcStall) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if !g.unary[info.FullMethodName] {
		return ctx, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	t := time.AfterFunc(g.bound, cancel)
	return context.WithValue(ctx, stallTimerKey{}, t), nil
}

func (g *grpcStall) intercept(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if t, ok := ctx.Value(stallTimerKey{}).(*time.Timer); ok {
		t.Stop()
	}
	return handler(ctx, req)
}
