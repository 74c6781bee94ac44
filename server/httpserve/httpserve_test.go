package httpserve

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"
)

func TestParseEngine(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Engine
		err  bool
	}{
		{"", NetHTTP, false},
		{"net/http", NetHTTP, false},
		{"fasthttp", FastHTTP, false},
		{"nethttp", "", true},
	} {
		got, err := ParseEngine(tc.in)
		if got != tc.want || (err != nil) != tc.err || err != nil && !errors.Is(err, ErrUnknownEngine) {
			t.Errorf("ParseEngine(%q) = %q, %v", tc.in, got, err)
		}
	}
}

// fixture is a Server on one engine with handlers that report what they
// saw on channels.
type fixture struct {
	srv     *Server
	addr    string
	gate    chan struct{} // /stream and /slow wait on it
	entered chan string   // a handler that blocks says so here
	hungUp  chan struct{} // /wait's context ended
}

func newFixture(t *testing.T, e Engine) *fixture {
	t.Helper()
	f := &fixture{gate: make(chan struct{}), entered: make(chan string, 4), hungUp: make(chan struct{}, 1)}
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("X-Content-Length", strconv.FormatInt(r.ContentLength, 10))
		_, _ = w.Write(b)
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		<-f.gate
		_, _ = io.WriteString(w, "second\n")
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		f.entered <- "slow"
		<-f.gate
		_, _ = io.WriteString(w, "done")
	})
	mux.HandleFunc("/wait", func(w http.ResponseWriter, r *http.Request) {
		f.entered <- "wait"
		select {
		case <-r.Context().Done():
			f.hungUp <- struct{}{}
		case <-time.After(20 * time.Second):
		}
	})
	mux.HandleFunc("/panic", func(http.ResponseWriter, *http.Request) { panic("handler panic") })
	f.srv, f.addr = serve(t, mux, Options{Engine: e, HeaderTimeout: 5 * time.Second, BodyTimeout: 5 * time.Second,
		Streamed: func(_, path string) bool { return path == "/stream" }})
	// Cleanups run last first: the blocked handlers are let go before
	// serve's shutdown waits for them.
	t.Cleanup(func() {
		select {
		case <-f.gate:
		default:
			close(f.gate)
		}
	})
	return f
}

// serve serves h on a loopback port until the test ends, when it shuts the
// server down and checks what Serve returned.
func serve(t *testing.T, h http.Handler, o Options) (*Server, string) {
	t.Helper()
	srv, err := New(h, o)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return srv, l.Addr().String()
}

func (f *fixture) dial(t *testing.T) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return c, bufio.NewReader(c)
}

func readBody(t *testing.T, rd *bufio.Reader) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestEngines(t *testing.T) {
	for _, e := range Engines {
		t.Run(string(e), func(t *testing.T) {
			t.Run("pipelined requests, a fixed-length and a chunked body", func(t *testing.T) {
				f := newFixture(t, e)
				c, rd := f.dial(t)
				fmt.Fprintf(c, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"+
					"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
				for _, want := range []struct{ body, length string }{{"hello", "5"}, {"abcde", "-1"}} {
					resp, body := readBody(t, rd)
					if resp.StatusCode != 200 || body != want.body || resp.Header.Get("X-Content-Length") != want.length {
						t.Fatalf("%d %q length %s, want %q length %s", resp.StatusCode, body, resp.Header.Get("X-Content-Length"), want.body, want.length)
					}
				}
			})
			t.Run("a flushed reply arrives before the handler returns", func(t *testing.T) {
				f := newFixture(t, e)
				c, rd := f.dial(t)
				fmt.Fprintf(c, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
				resp, err := http.ReadResponse(rd, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				br := bufio.NewReader(resp.Body)
				if line, err := br.ReadString('\n'); line != "first\n" {
					t.Fatalf("first line %q (%v)", line, err)
				}
				close(f.gate)
				if rest, err := io.ReadAll(br); string(rest) != "second\n" || err != nil {
					t.Fatalf("rest %q (%v)", rest, err)
				}
			})
			t.Run("a client that hangs up ends the request's context", func(t *testing.T) {
				f := newFixture(t, e)
				c, _ := f.dial(t)
				fmt.Fprintf(c, "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")
				<-f.entered
				_ = c.Close()
				select {
				case <-f.hungUp:
				case <-time.After(10 * time.Second):
					t.Fatal("the handler's context did not end within 10 s of the hang-up")
				}
			})
			t.Run("a panicking handler drops its connection, not the server", func(t *testing.T) {
				f := newFixture(t, e)
				c, rd := f.dial(t)
				fmt.Fprintf(c, "GET /panic HTTP/1.1\r\nHost: x\r\n\r\n")
				if b, err := io.ReadAll(rd); len(b) != 0 || err != nil {
					t.Fatalf("read %q (%v), want the connection closed without a reply", b, err)
				}
				c2, rd2 := f.dial(t)
				fmt.Fprintf(c2, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nok")
				if resp, body := readBody(t, rd2); resp.StatusCode != 200 || body != "ok" {
					t.Fatalf("after the panic: %d %q", resp.StatusCode, body)
				}
			})
			t.Run("shutdown lets the request in flight finish", func(t *testing.T) {
				f := newFixture(t, e)
				c, rd := f.dial(t)
				fmt.Fprintf(c, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
				<-f.entered
				shut := make(chan error, 1)
				go func() { shut <- f.srv.Shutdown(context.Background()) }()
				waitRefused(t, f.addr)
				close(f.gate)
				if resp, body := readBody(t, rd); resp.StatusCode != 200 || body != "done" {
					t.Fatalf("in-flight request: %d %q", resp.StatusCode, body)
				}
				if err := <-shut; err != nil {
					t.Fatalf("Shutdown: %v", err)
				}
			})
			t.Run("shutdown out of time closes the connections left", func(t *testing.T) {
				f := newFixture(t, e)
				c, rd := f.dial(t)
				fmt.Fprintf(c, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
				<-f.entered
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				defer cancel()
				if err := f.srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("Shutdown = %v, want the deadline", err)
				}
				if _, err := rd.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("connection still open after Shutdown gave up: %v", err)
				}
			})
		})
	}
}

// waitRefused waits until addr refuses connections: the listener closed.
func waitRefused(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return
		}
		_ = c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the listener still accepts 10 s after Shutdown")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
