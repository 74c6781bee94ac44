package httpserve

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"testing/iotest"
	"time"
)

// arena is a fixed set of buffers a handler borrows a reply's bytes from
// and gives back in its release, as the infer handler does with a stub's
// memory: a reply whose release never runs leaves it one short.
type arena chan []byte

func newArena(n, size int) arena {
	a := make(arena, n)
	for range n {
		a <- make([]byte, size)
	}
	return a
}

// waitFull waits until every buffer is back.
func (a arena) waitFull(t *testing.T, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(a) != cap(a) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d buffers back after 10 s", what, len(a), cap(a))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// pattern fills b with bytes that depend on seed.
func pattern(b []byte, seed int) {
	for i := range b {
		b[i] = byte(i*7 + seed)
	}
}

const keptPrefix = `{"json":"header"}`

// keptServer serves /kept?seed=N&size=M[&panic=1]: keptPrefix, then size
// bytes of pattern seed from a buffer of a, through KeepWriter. The
// release scribbles over the buffer before it gives it back, so that a
// body written after its release shows it. X-Kept says whether
// KeepWriter took the release; returned gets a value when the handler
// returns.
func keptServer(t *testing.T, e Engine, a arena) (addr string, returned chan struct{}) {
	t.Helper()
	returned = make(chan struct{}, 16)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { returned <- struct{}{} }()
		q := r.URL.Query()
		seed, _ := strconv.Atoi(q.Get("seed"))
		size, _ := strconv.Atoi(q.Get("size"))
		var buf []byte
		select {
		case buf = <-a:
		default:
			http.Error(w, "arena full", http.StatusServiceUnavailable)
			return
		}
		buf = buf[:size]
		pattern(buf, seed)
		release := func() {
			for i := range buf {
				buf[i] = 0xee
			}
			a <- buf[:cap(buf)]
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(keptPrefix)+size))
		kw, kept := KeepWriter(w, release)
		if !kept {
			defer release()
		}
		w.Header().Set("X-Kept", strconv.FormatBool(kept))
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, keptPrefix[:5])
		_, _ = kw.Write(buf[:size/2])
		_, _ = io.WriteString(w, keptPrefix[5:]) // a copied write between kept ones
		_, _ = kw.Write(buf[size/2:])
		if q.Get("panic") != "" {
			panic(http.ErrAbortHandler)
		}
	})
	_, addr = serve(t, h, Options{Engine: e, HeaderTimeout: 5 * time.Second, BodyTimeout: 5 * time.Second})
	return addr, returned
}

// wantKept is the body /kept answers with.
func wantKept(seed, size int) []byte {
	b := make([]byte, size)
	pattern(b, seed)
	return append(append(append([]byte(keptPrefix[:5]), b[:size/2]...), keptPrefix[5:]...), b[size/2:]...)
}

func TestKeepWriter(t *testing.T) {
	const size = 16 << 20
	for _, e := range Engines {
		t.Run(string(e), func(t *testing.T) {
			a := newArena(2, size)
			addr, returned := keptServer(t, e, a)
			dial := func(t *testing.T) (net.Conn, *bufio.Reader) {
				f := &fixture{addr: addr}
				return f.dial(t)
			}
			t.Run("large replies arrive whole and give their memory back", func(t *testing.T) {
				c, rd := dial(t)
				for i := range 12 { // six times the arena: one left behind fills it
					n := size >> (i % 3) // 16, 8 and 4 MiB
					fmt.Fprintf(c, "GET /kept?seed=%d&size=%d HTTP/1.1\r\nHost: x\r\n\r\n", i, n)
					resp, body := readBody(t, rd)
					if resp.StatusCode != http.StatusOK {
						t.Fatalf("request %d: %d %.100s", i, resp.StatusCode, body)
					}
					if kept := resp.Header.Get("X-Kept"); kept != strconv.FormatBool(e == FastHTTP) {
						t.Errorf("request %d: KeepWriter took the release: %s", i, kept)
					}
					if !bytes.Equal([]byte(body), wantKept(i, n)) {
						t.Fatalf("request %d: %d bytes differ from the %d written", i, len(body), len(keptPrefix)+n)
					}
				}
				a.waitFull(t, "after the replies")
			})
			t.Run("a HEAD request gives the memory back", func(t *testing.T) {
				c, rd := dial(t)
				fmt.Fprintf(c, "HEAD /kept?seed=1&size=%d HTTP/1.1\r\nHost: x\r\n\r\n", size)
				resp, err := http.ReadResponse(rd, &http.Request{Method: http.MethodHead})
				if err != nil {
					t.Fatal(err)
				}
				if want := int64(len(keptPrefix) + size); resp.StatusCode != http.StatusOK || resp.ContentLength != want {
					t.Fatalf("HEAD: %d, length %d, want 200 and %d", resp.StatusCode, resp.ContentLength, want)
				}
				a.waitFull(t, "after HEAD")
			})
			t.Run("a handler that panics after keeping gives the memory back", func(t *testing.T) {
				c, rd := dial(t)
				fmt.Fprintf(c, "GET /kept?seed=1&size=%d&panic=1 HTTP/1.1\r\nHost: x\r\n\r\n", size)
				// net/http has sent what the handler wrote before it
				// panicked; fasthttp had it kept, and sends nothing.
				if b, err := io.ReadAll(rd); e == FastHTTP && len(b) != 0 || err != nil {
					t.Fatalf("read %d bytes (%v), want the connection closed without a reply", len(b), err)
				}
				a.waitFull(t, "after the panic")
			})
			t.Run("a client that hangs up mid-body gives the memory back", func(t *testing.T) {
				// A small receive buffer, so that the reply cannot all be
				// in the sockets' buffers when the handler returns.
				d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
					return rc.Control(func(fd uintptr) {
						_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
					})
				}}
				c, err := d.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				for len(returned) > 0 {
					<-returned
				}
				fmt.Fprintf(c, "GET /kept?seed=2&size=%d HTTP/1.1\r\nHost: x\r\n\r\n", size)
				if _, err := io.ReadFull(c, make([]byte, 1024)); err != nil {
					t.Fatal(err)
				}
				if e == FastHTTP {
					// The handler has returned, and the reply is still
					// being written from the buffer it kept.
					select {
					case <-returned:
					case <-time.After(10 * time.Second):
						t.Fatal("the handler did not return within 10 s")
					}
					if len(a) != cap(a)-1 {
						t.Fatalf("%d of %d buffers free while the body is written", len(a), cap(a))
					}
				}
				_ = c.Close()
				a.waitFull(t, "after the hang-up")
			})
		})
	}
}

// TestKeptBody checks that Read and WriteTo give a kept body's bytes in
// order, whatever its mix of kept and copied spans.
func TestKeptBody(t *testing.T) {
	for _, tc := range []struct {
		name  string
		parts []string // "k:" kept, "c:" copied
	}{
		{"empty", nil},
		{"copied only", []string{"c:ab", "c:cd"}},
		{"kept only", []string{"k:abc"}},
		{"mixed", []string{"c:{hdr}", "k:0123456789", "c:x", "c:y", "k:", "k:tail"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			build := func() (*keptBody, string) {
				k := new(keptBody)
				want := ""
				for _, p := range tc.parts {
					if p[0] == 'k' {
						k.keep([]byte(p[2:]))
					} else {
						k.copyIn([]byte(p[2:]))
					}
					want += p[2:]
				}
				return k, want
			}
			k, want := build()
			if k.size != len(want) {
				t.Errorf("size %d, want %d", k.size, len(want))
			}
			var b bytes.Buffer
			if _, err := k.WriteTo(&b); err != nil || b.String() != want {
				t.Errorf("WriteTo: %q (%v), want %q", b.String(), err, want)
			}
			k, _ = build()
			if err := iotest.TestReader(struct{ io.Reader }{k}, []byte(want)); err != nil {
				t.Error(err)
			}
			released := 0
			k.releases = append(k.releases, func() { released++ })
			_ = k.Close()
			if released != 1 || k.size != 0 || len(k.spans) != 0 {
				t.Errorf("after Close: %d releases, size %d, %d spans", released, k.size, len(k.spans))
			}
		})
	}
}
