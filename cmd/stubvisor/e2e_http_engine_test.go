package main

// End-to-end tests of the HTTP connection behaviours both --http-engine
// choices must keep: keep-alive, Expect: 100-continue, chunked bodies, the
// header and body timeouts, server-sent events that arrive as the model
// sends them, a client hang-up that cancels the request, and a graceful
// shutdown that answers the request in flight. Each runs on both engines,
// over raw connections where the behaviour is below what net/http's client
// shows.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// engineBound is how long past a 1 s timeout the server may take to act on
// it on a busy machine.
const engineBound = 4 * time.Second

func TestHTTPEngines(t *testing.T) {
	ipctest.RequirePython(t)
	for _, engine := range []string{"net/http", "fasthttp"} {
		t.Run(engine, func(t *testing.T) {
			repo := copyRepo(t, "add_sub", "token_gen", "e2e_echo", "cancel_watch")
			s := startServer(t, repo, "--http-engine", engine, "--http-header-timeout", "1s",
				"--request-body-timeout", "1s", "--exit-timeout-secs", "20")
			addr := strings.TrimPrefix(s.HTTP, "http://")
			body := httpMustJSON(t, httpAddSubJSON([]float32{1, 2, 3, 4}, []float32{1, 1, 1, 1}))
			for _, tc := range []struct {
				name string
				run  func(t *testing.T)
			}{
				{"keep-alive serves requests one after another on one connection", func(t *testing.T) {
					c, rd := dialHTTP(t, addr)
					for i := range 3 {
						writeInfer(t, c, addr, body, "")
						checkAddSub(t, readResponse(t, rd), fmt.Sprintf("request %d", i))
					}
				}},
				{"Expect: 100-continue is answered before the body is sent", func(t *testing.T) {
					c, rd := dialHTTP(t, addr)
					fmt.Fprintf(c, "POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"+
						"Content-Length: %d\r\nExpect: 100-continue\r\n\r\n", addr, len(body))
					line, err := rd.ReadString('\n')
					if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
						t.Fatalf("interim line %q (%v), want 100 Continue", line, err)
					}
					if l, _ := rd.ReadString('\n'); l != "\r\n" {
						t.Fatalf("interim response not ended: %q", l)
					}
					if _, err := c.Write(body); err != nil {
						t.Fatal(err)
					}
					checkAddSub(t, readResponse(t, rd), "after 100-continue")
				}},
				{"a chunked body in several chunks", func(t *testing.T) {
					c, rd := dialHTTP(t, addr)
					half := len(body) / 2
					fmt.Fprintf(c, "POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n"+
						"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n", addr, half, body[:half], len(body)-half, body[half:])
					checkAddSub(t, readResponse(t, rd), "chunked")
				}},
				{"headers that trickle past the header timeout end the connection", func(t *testing.T) {
					c, _ := dialHTTP(t, addr)
					fmt.Fprintf(c, "GET /v2/health/live HTTP/1.1\r\nHost: %s\r\n", addr)
					ctx, stop := context.WithCancel(context.Background())
					t.Cleanup(stop)
					go func() { // a header line every 200 ms, never the blank line
						tick := time.NewTicker(200 * time.Millisecond)
						defer tick.Stop()
						for i := 0; ; i++ {
							select {
							case <-ctx.Done():
								return
							case <-tick.C:
								if _, err := fmt.Fprintf(c, "X-Slow-%d: 1\r\n", i); err != nil {
									return
								}
							}
						}
					}()
					expectClosed(t, c, "trickled headers")
				}},
				{"a body that stalls past the body timeout ends the connection", func(t *testing.T) {
					c, _ := dialHTTP(t, addr)
					fmt.Fprintf(c, "POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s",
						addr, len(body), body[:10])
					expectClosed(t, c, "stalled body")
				}},
				{"server-sent events arrive as the model sends them", func(t *testing.T) {
					// The model sends its second token only once the test has
					// seen the first and created the gate file.
					gate := filepath.Join(t.TempDir(), "gate")
					st := curlSSE(t, s, "/v2/models/token_gen/generate_stream",
						fmt.Sprintf(`{"text_input":"a b c","max_tokens":3,"wait_for":%q}`, gate))
					if _, ok := st.next(); !ok {
						t.Fatal("no first event before the stream ended")
					}
					if err := os.WriteFile(gate, nil, 0o644); err != nil {
						t.Fatal(err)
					}
					if toks := tokens(t, st.all()); len(toks) != 2 {
						t.Fatalf("%d more tokens, want 2", len(toks))
					}
				}},
				{"a client that hangs up cancels its request", func(t *testing.T) {
					id := "hangup-" + strings.ReplaceAll(engine, "/", "")
					req := httpMustJSON(t, map[string]any{"id": id, "inputs": []map[string]any{
						{"name": "WAIT_MS", "datatype": "UINT32", "shape": []int{1}, "data": []int{30000}}}})
					c, _ := dialHTTP(t, addr)
					fmt.Fprintf(c, "POST /v2/models/cancel_watch/infer HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s", addr, len(req), req)
					waitLog(t, s, "cancel_watch: request '"+id+"' running")
					_ = c.Close()
					waitLog(t, s, "cancel_watch: request '"+id+"' cancelled")
				}},
				{"a graceful shutdown answers the request in flight", func(t *testing.T) {
					req := httpMustJSON(t, map[string]any{
						"parameters": map[string]any{"sleep_ms": 1500},
						"inputs":     []map[string]any{{"name": "INPUT0", "shape": []int{2}, "datatype": "FP32", "data": []float32{7, 8}}},
					})
					c, rd := dialHTTP(t, addr)
					writeInfer(t, c, addr, req, "e2e_echo")
					waitInFlight(t, s, "e2e_echo", 1, 10*time.Second, "the request to be in execute")
					if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
						t.Fatal(err)
					}
					resp := readResponse(t, rd)
					r := httpDecodeInfer(t, resp.code, resp.h, resp.body)
					if got := httpCanonJSON(t, r.output(t, "OUTPUT0").Data); got != "[7,8]" {
						t.Fatalf("in-flight request answered %s", resp.body)
					}
					select {
					case <-s.exited:
					case <-time.After(30 * time.Second):
						t.Fatal("stubvisor still running 30 s after SIGTERM")
					}
					if s.waitErr != nil {
						t.Errorf("exit status: %v", s.waitErr)
					}
				}},
			} {
				t.Run(tc.name, tc.run)
			}
		})
	}
}

// dialHTTP opens a connection to addr, closed at cleanup, with a reader.
func dialHTTP(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.SetDeadline(time.Now().Add(60 * time.Second)); err != nil {
		t.Fatal(err)
	}
	return c, bufio.NewReader(c)
}

// writeInfer writes a JSON infer request of model (default add_sub).
func writeInfer(t *testing.T, c net.Conn, addr string, body []byte, model string) {
	t.Helper()
	if model == "" {
		model = "add_sub"
	}
	if _, err := fmt.Fprintf(c, "POST /v2/models/%s/infer HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		model, addr, len(body), body); err != nil {
		t.Fatal(err)
	}
}

type rawResponse struct {
	code int
	h    http.Header
	body []byte
}

// readResponse reads one response off the connection.
func readResponse(t *testing.T, rd *bufio.Reader) rawResponse {
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
	return rawResponse{resp.StatusCode, resp.Header, b}
}

// checkAddSub checks add_sub's answer to [1,2,3,4] and [1,1,1,1].
func checkAddSub(t *testing.T, resp rawResponse, what string) {
	t.Helper()
	if resp.code != http.StatusOK {
		t.Fatalf("%s: status %d: %s", what, resp.code, resp.body)
	}
	var r struct {
		Outputs []struct {
			Name string
			Data []float32
		}
	}
	if err := json.Unmarshal(resp.body, &r); err != nil {
		t.Fatalf("%s: %v: %s", what, err, resp.body)
	}
	want := map[string]string{"OUTPUT0": "[2 3 4 5]", "OUTPUT1": "[0 1 2 3]"}
	for _, o := range r.Outputs {
		if got := fmt.Sprint(o.Data); got != want[o.Name] {
			t.Errorf("%s: %s = %s, want %s", what, o.Name, got, want[o.Name])
		}
	}
	if len(r.Outputs) != 2 {
		t.Errorf("%s: %d outputs: %s", what, len(r.Outputs), bytes.TrimSpace(resp.body))
	}
}

// expectClosed waits for the server to close c (whatever it answers
// first) within the 1 s timeout plus engineBound.
func expectClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	start := time.Now()
	// io.Copy returns when the server closes the connection: at its end,
	// or with a reset when it closed with the client's bytes unread.
	_, err := io.Copy(io.Discard, c)
	if took := time.Since(start); errors.Is(err, os.ErrDeadlineExceeded) || took > time.Second+engineBound {
		t.Errorf("%s: connection closed after %s (%v), want within %s", what, took, err, time.Second+engineBound)
	}
}
