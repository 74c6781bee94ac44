package httpserve

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"testing"
	"time"
	"unsafe"
)

// TestParseRequestURI checks the bridge's URI parse against
// url.ParseRequestURI, on the URIs it takes itself and on those it hands on.
func TestParseRequestURI(t *testing.T) {
	for _, s := range []string{
		"/", "/v2/models/m/infer", "/v2/models/m/versions/1/infer", "/a?b=c&d=e", "/a?", "/a??",
		"/a?b?", "/a?b?c", "//x/y", "///x", "/a%20b", "/a%2Fb", "/a b", "/a(b)", "/a*b", "/a!b",
		"/a'b", "/é", "/a#b", "/a?b#c", "/a?b c", "/a?\x01", "/a\x7f", "/a:b@c;d=e,f+g$h&i~j",
		"*", "", "a/b", "http://host/p?q", "HTTP://host/p", "/a?%zz", "/a%zz", "?q", "/\x00",
	} {
		t.Run(s, func(t *testing.T) {
			want, wantErr := url.ParseRequestURI(s)
			var got url.URL
			err := parseRequestURI(s, &got)
			if (err != nil) != (wantErr != nil) {
				t.Fatalf("error %v, url.ParseRequestURI's %v", err, wantErr)
			}
			if err == nil && !reflect.DeepEqual(&got, want) {
				t.Fatalf("got %#v, url.ParseRequestURI gives %#v", got, *want)
			}
		})
	}
}

// TestInterned checks that a repeated value reuses the previous string and
// a changed one is new, without touching a string handed out before.
func TestInterned(t *testing.T) {
	c := &conn{}
	b := []byte("application/json")
	first := c.headerValue(0, b)
	again := c.headerValue(0, b)
	if unsafeData(first) != unsafeData(again) {
		t.Fatal("the same bytes gave a new string")
	}
	b[0] = 'A'
	changed := c.headerValue(0, b)
	if changed != "Application/json" || first != "application/json" {
		t.Fatalf("changed %q, first %q", changed, first)
	}
	for i := range internHeaders + 2 {
		if got := c.headerValue(i, []byte("v")); got != "v" {
			t.Fatalf("header %d: %q", i, got)
		}
	}
	if len(c.lastVals) != internHeaders {
		t.Fatalf("remembers %d values, want at most %d", len(c.lastVals), internHeaders)
	}
	var nilConn *conn
	if got := nilConn.headerValue(0, b); got != "Application/json" {
		t.Fatalf("without a conn: %q", got)
	}
}

func unsafeData(s string) *byte { return unsafe.StringData(s) }

// requestView is what a handler sees of a request, as a comparable value.
type requestView struct {
	Method, Proto, Host, RequestURI, RemoteAddr string
	URL                                         url.URL
	Header                                      http.Header
	ContentLength                               int64
	Body                                        string
}

func viewOf(r *http.Request, body string) requestView {
	return requestView{Method: r.Method, Proto: r.Proto, Host: r.Host, RequestURI: r.RequestURI,
		RemoteAddr: r.RemoteAddr, URL: *r.URL, Header: r.Header.Clone(), ContentLength: r.ContentLength, Body: body}
}

// TestBridgeRequestView sends the same requests over one keep-alive
// connection to each engine: the bridge must hand the handler what
// net/http does, and a request a handler kept must not change while later
// requests on the connection reuse its strings.
func TestBridgeRequestView(t *testing.T) {
	many := ""
	for i := range bridgeHeaders + 2 {
		many += fmt.Sprintf("X-H-%d: v%d\r\n", i, i)
	}
	reqs := []string{
		"POST /v2/models/m/infer HTTP/1.1\r\nHost: h1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
		"POST /v2/models/m/infer HTTP/1.1\r\nHost: h1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n[]",
		"POST /v2/models/m/infer HTTP/1.1\r\nHost: h2\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nabc",
		"GET /v2/models/m?x=1&y=%20 HTTP/1.1\r\nHost: h2\r\nX-A: 1\r\nX-A: 2\r\nUser-Agent: ua\r\n\r\n",
		"GET /a%2Fb/c HTTP/1.1\r\nHost: h2\r\nX-A: 3\r\n" + many + "\r\n",
		"GET /v2/models/m?x=1&y=%20 HTTP/1.1\r\nHost: h1\r\nX-A: 1\r\nX-A: 2\r\nUser-Agent: ua\r\n\r\n",
		"GET /v2 HTTP/1.0\r\nHost: h1\r\nConnection: keep-alive\r\n\r\n",
	}
	views := map[Engine][]requestView{}
	for _, e := range Engines {
		t.Run(string(e), func(t *testing.T) {
			var kept []*http.Request
			var seen []requestView
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				kept, seen = append(kept, r), append(seen, viewOf(r, string(b)))
				_, _ = io.WriteString(w, "ok")
			})
			_, addr := serve(t, h, Options{Engine: e})
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			rd := bufio.NewReader(c)
			for i, req := range reqs {
				if _, err := io.WriteString(c, req); err != nil {
					t.Fatal(err)
				}
				resp, err := http.ReadResponse(rd, nil)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("request %d: %s", i, resp.Status)
				}
			}
			if len(seen) != len(reqs) {
				t.Fatalf("handler saw %d requests, want %d", len(seen), len(reqs))
			}
			for i, r := range kept {
				if now := viewOf(r, seen[i].Body); !reflect.DeepEqual(now, seen[i]) {
					t.Errorf("request %d changed after its handler returned:\n%+v\nwas\n%+v", i, now, seen[i])
				}
				if seen[i].RemoteAddr != c.LocalAddr().String() {
					t.Errorf("request %d: RemoteAddr %q, want %q", i, seen[i].RemoteAddr, c.LocalAddr())
				}
				seen[i].RemoteAddr = ""
			}
			views[e] = seen
		})
	}
	if len(views[NetHTTP]) != len(reqs) || len(views[FastHTTP]) != len(reqs) {
		t.Fatalf("views: %d net/http, %d fasthttp", len(views[NetHTTP]), len(views[FastHTTP]))
	}
	for i, want := range views[NetHTTP] {
		if got := views[FastHTTP][i]; !reflect.DeepEqual(got, want) {
			t.Errorf("request %d: fasthttp engine's handler saw\n%+v\nnet/http's\n%+v", i, got, want)
		}
	}
}
