package httpserve

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
)

// BenchmarkEngines serves a trivial handler (read a small body, write a
// small reply) on each engine over one keep-alive loopback connection;
// the client is the same for all, so the differences are the servers'.
// "fasthttp-adaptor" sends every request through fasthttpadaptor, as the
// streamed routes go.
func BenchmarkEngines(b *testing.B) {
	body := make([]byte, 200)
	reply := make([]byte, 200)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(reply)
	})
	for _, tc := range []struct {
		name     string
		engine   Engine
		streamed func(string, string) bool
	}{
		{"net-http", NetHTTP, nil},
		{"fasthttp-bridge", FastHTTP, nil},
		{"fasthttp-adaptor", FastHTTP, func(string, string) bool { return true }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			srv, err := New(h, Options{Engine: tc.engine, Streamed: tc.streamed})
			if err != nil {
				b.Fatal(err)
			}
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go func() { _ = srv.Serve(l) }()
			defer func() { _ = srv.Shutdown(context.Background()) }()
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			req := []byte(fmt.Sprintf("POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
			rd := bufio.NewReader(c)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				resp, err := http.ReadResponse(rd, nil)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
