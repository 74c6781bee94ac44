package main

// The generate extension end to end: testdata/models/token_gen (a decoupled
// Python token generator) behind the built binary, read by curl, whose
// streaming output (-N) is what a user pipes into their tools.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// sseEvent is one Server-Sent Event as curl received it: the data field.
type sseEvent struct {
	Data string
}

// sseStream is a curl process reading a generate_stream answer.
type sseStream struct {
	t       *testing.T
	cmd     *exec.Cmd
	headers string // file curl writes the response headers to
	events  chan sseEvent
	exited  chan struct{}
	waitErr error
	junk    []string // lines that are neither data fields nor event ends
}

// curlSSE POSTs body to path with curl -N and parses what it prints into
// events as they arrive.
func curlSSE(t *testing.T, s *server, path, body string) *sseStream {
	t.Helper()
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("the generate_stream tests read the stream with curl")
	}
	st := &sseStream{t: t, headers: filepath.Join(t.TempDir(), "headers"),
		events: make(chan sseEvent, 1024), exited: make(chan struct{})}
	st.cmd = exec.Command(curl, "-sS", "-N", "-X", "POST", "-H", "Accept: text/event-stream",
		"-H", "Content-Type: application/json", "-D", st.headers, "--data-binary", body, s.HTTP+path)
	out, err := st.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.kill() })
	go func() {
		defer close(st.exited)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var data []string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "data: "):
				data = append(data, strings.TrimPrefix(line, "data: "))
			case line == "" && data != nil:
				st.events <- sseEvent{Data: strings.Join(data, "\n")}
				data = nil
			default:
				st.junk = append(st.junk, line)
			}
		}
		if data != nil {
			st.junk = append(st.junk, "unterminated event: "+strings.Join(data, "\n"))
		}
		st.waitErr = st.cmd.Wait()
		close(st.events)
	}()
	return st
}

// next returns the next event, or ok=false when the stream ended.
func (st *sseStream) next() (map[string]any, bool) {
	st.t.Helper()
	select {
	case ev, ok := <-st.events:
		if !ok {
			return nil, false
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(ev.Data), &m); err != nil {
			st.t.Fatalf("event data is not a JSON object: %v: %q", err, ev.Data)
		}
		return m, true
	case <-time.After(60 * time.Second):
		st.t.Fatal("no event within 60s")
		return nil, false
	}
}

// all reads the rest of the stream and checks that curl succeeded and
// printed nothing but events.
func (st *sseStream) all() []map[string]any {
	st.t.Helper()
	var out []map[string]any
	for {
		m, ok := st.next()
		if !ok {
			break
		}
		out = append(out, m)
	}
	<-st.exited
	if st.waitErr != nil {
		st.t.Fatalf("curl: %v", st.waitErr)
	}
	if len(st.junk) > 0 {
		st.t.Fatalf("stream has lines outside events: %q", st.junk)
	}
	return out
}

// status returns the status line and Content-Type curl received.
func (st *sseStream) status() (string, string) {
	st.t.Helper()
	b, err := os.ReadFile(st.headers)
	if err != nil {
		st.t.Fatal(err)
	}
	lines := strings.Split(strings.ReplaceAll(string(b), "\r", ""), "\n")
	ctype := ""
	for _, l := range lines[1:] {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(k, "Content-Type") {
			ctype = strings.TrimSpace(v)
		}
	}
	return lines[0], ctype
}

func (st *sseStream) kill() {
	if st.cmd.Process != nil {
		_ = st.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-st.exited
}

// tokens returns the text_output of each event, failing on any other kind.
func tokens(t *testing.T, evs []map[string]any) []string {
	t.Helper()
	var out []string
	for _, ev := range evs {
		tok, ok := ev["text_output"].(string)
		if !ok || ev["model_name"] != "token_gen" || ev["model_version"] != "1" {
			t.Fatalf("event %v is not a token_gen response", ev)
		}
		out = append(out, tok)
	}
	return out
}

func TestGenerate(t *testing.T) {
	slow(t)
	ipctest.RequirePython(t)
	s := startServer(t, copyRepo(t, "token_gen"))

	t.Run("stream", func(t *testing.T) {
		st := curlSSE(t, s, "/v2/models/token_gen/generate_stream", `{"text_input":"the quick fox","max_tokens":5,"id":"r1"}`)
		evs := st.all()
		if got := strings.Join(tokens(t, evs), ""); got != "the quick fox the quick " {
			t.Fatalf("streamed text %q", got)
		}
		for _, ev := range evs {
			if ev["id"] != "r1" {
				t.Errorf("event %v lacks the request id", ev)
			}
		}
		line, ctype := st.status()
		if !strings.Contains(line, " 200") || ctype != "text/event-stream; charset=utf-8" {
			t.Fatalf("status %q, Content-Type %q", line, ctype)
		}
	})
	t.Run("events arrive as the model sends them", func(t *testing.T) {
		// The model sends its second token only once the test has seen
		// the first and created the gate file.
		gate := filepath.Join(t.TempDir(), "gate")
		st := curlSSE(t, s, "/v2/models/token_gen/versions/1/generate_stream", fmt.Sprintf(`{"text_input":"a","max_tokens":3,"wait_for":%q}`, gate))
		if _, ok := st.next(); !ok {
			t.Fatal("no first event")
		}
		if err := os.WriteFile(gate, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if toks := tokens(t, st.all()); len(toks) != 2 {
			t.Fatalf("%d more tokens, want 2", len(toks))
		}
	})
	t.Run("error mid-stream", func(t *testing.T) {
		st := curlSSE(t, s, "/v2/models/token_gen/generate_stream", `{"text_input":"x y","max_tokens":5,"fail_after":2}`)
		evs := st.all()
		if len(evs) != 3 || evs[2]["error"] != "token_gen: failed after 2 tokens" || len(evs[2]) != 1 {
			t.Fatalf("events %v", evs)
		}
		if got := strings.Join(tokens(t, evs[:2]), ""); got != "x y " {
			t.Fatalf("tokens before the error %q", got)
		}
		if line, _ := st.status(); !strings.Contains(line, " 200") {
			t.Fatalf("status %q: an error after the first event keeps 200", line)
		}
	})
	t.Run("error first sets the status", func(t *testing.T) {
		st := curlSSE(t, s, "/v2/models/token_gen/generate_stream", `{"text_input":"x","fail_after":0}`)
		evs := st.all()
		if len(evs) != 1 || evs[0]["error"] != "token_gen: failed after 0 tokens" {
			t.Fatalf("events %v", evs)
		}
		if line, ctype := st.status(); !strings.Contains(line, " 500") || ctype != "text/event-stream; charset=utf-8" {
			t.Fatalf("status %q, Content-Type %q", line, ctype)
		}
	})
	t.Run("no responses is an empty stream", func(t *testing.T) {
		st := curlSSE(t, s, "/v2/models/token_gen/generate_stream", `{"text_input":"x","max_tokens":0}`)
		if evs := st.all(); len(evs) != 0 {
			t.Fatalf("events %v", evs)
		}
	})
	t.Run("request errors are JSON", func(t *testing.T) {
		st := curlSSE(t, s, "/v2/models/token_gen/generate_stream", `{"max_tokens":2}`)
		if _, ok := st.next(); ok {
			t.Fatal("an event for a request that failed before inference")
		}
		<-st.exited
		const want = `{"error":"expected 1 inputs but got 0 inputs for model 'token_gen'. Got input(s) [], but missing required input(s) ['text_input']. Please provide all required input(s)."}`
		if strings.Join(st.junk, "\n") != want {
			t.Fatalf("body %q", st.junk)
		}
		if line, ctype := st.status(); !strings.Contains(line, " 400") || ctype != "application/json" {
			t.Fatalf("status %q, Content-Type %q", line, ctype)
		}
	})
	t.Run("client disconnect cancels the request", func(t *testing.T) {
		st := curlSSE(t, s, "/v2/models/token_gen/generate_stream", `{"text_input":"a b","max_tokens":500,"delay_ms":20}`)
		for range 2 {
			if _, ok := st.next(); !ok {
				t.Fatal("the stream ended early")
			}
		}
		st.kill()
		// token_gen runs one request at a time: this one starts only
		// once the abandoned one has stopped (500 tokens would take 10s).
		code, body := s.postJSON("/v2/models/token_gen/generate", map[string]any{"text_input": "x", "max_tokens": 1})
		if code != 200 {
			t.Fatalf("generate after the disconnect: %d %s", code, body)
		}
		waitFor(t, 30*time.Second, "the model to log the cancellation", func() bool {
			return strings.Contains(s.Log(), "token_gen: cancelled after")
		})
		if strings.Contains(s.Log(), "token_gen: finished 500 tokens") {
			t.Fatalf("the model ran the abandoned request to its end:\n%s", s.Log())
		}
		waitInFlight(t, s, "token_gen", 0, 30*time.Second, "no request in flight on token_gen")
	})
	t.Run("a reader that stops reading stalls the model", func(t *testing.T) {
		// 300000 small tokens (they travel inside the stub's ring
		// messages) to a client that reads nothing: socket buffers, the
		// stream's queue and the ring hold a few MB, so the model's sends
		// must stop far short of the end.
		const total = 300000
		progress := filepath.Join(t.TempDir(), "progress")
		body := fmt.Sprintf(`{"text_input":"tok","max_tokens":%d,"progress_file":%q}`, total, progress)
		conn, err := net.Dial("tcp", strings.TrimPrefix(s.HTTP, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		fmt.Fprintf(conn, "POST /v2/models/token_gen/generate_stream HTTP/1.1\r\nHost: stubvisor\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		sent := func() int {
			b, _ := os.ReadFile(progress)
			n, _ := strconv.Atoi(string(b))
			return n
		}
		last, same := -1, 0
		waitFor(t, 60*time.Second, "the model's sends to stall", func() bool {
			n := sent()
			if n > 0 && n == last {
				same++
			} else {
				last, same = n, 0
			}
			return same >= 25 || n == total // unchanged for half a second, or done
		})
		if last >= total/2 {
			t.Fatalf("the model sent %d of %d tokens to a client that read none", last, total)
		}
		// Reading again lets the model finish; every token arrives.
		if err := conn.SetReadDeadline(time.Now().Add(120 * time.Second)); err != nil {
			t.Fatal(err)
		}
		// The events are counted in the decoded body: a chunk boundary
		// may fall anywhere in an event's line.
		resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 64<<10), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		rd := bufio.NewReaderSize(resp.Body, 64<<10)
		events := 0
		for events < total {
			line, err := rd.ReadSlice('\n')
			if err != nil && err != bufio.ErrBufferFull {
				t.Fatalf("after %d events: %v", events, err)
			}
			if bytes.HasPrefix(line, []byte("data: {")) {
				events++
			}
		}
		t.Logf("stalled at %d of %d tokens", last, total)
	})
	t.Run("generate", func(t *testing.T) {
		code, body := s.postJSON("/v2/models/token_gen/generate", map[string]any{"text_input": "hello world", "max_tokens": 1, "id": "9"})
		want := `{"id":"9","model_name":"token_gen","model_version":"1","text_output":"hello "}`
		if code != 200 || string(body) != want {
			t.Fatalf("%d %s, want %s", code, body, want)
		}
	})
	t.Run("generate wants exactly one response", func(t *testing.T) {
		for _, n := range []int{0, 3} {
			code, body := s.postJSON("/v2/models/token_gen/generate", map[string]any{"text_input": "a", "max_tokens": n})
			const msg = "generate expects model to produce exactly 1 response, use generate stream for model that generates various number of responses"
			if code != 500 || errorText(body) != msg {
				t.Fatalf("max_tokens %d: %d %s", n, code, body)
			}
		}
	})
	t.Run("generate input type error", func(t *testing.T) {
		code, body := s.postJSON("/v2/models/token_gen/generate", map[string]any{"text_input": 5})
		// Triton's JSON accessor errors are INTERNAL.
		if code != 500 || !strings.Contains(errorText(body), "attempt to access JSON non-string as string") {
			t.Fatalf("%d %s", code, body)
		}
	})
	t.Run("server metadata lists generate", func(t *testing.T) {
		var md struct{ Extensions []string }
		s.getJSON("/v2", &md)
		if !strings.Contains(strings.Join(md.Extensions, ","), "generate") {
			t.Fatalf("extensions %v", md.Extensions)
		}
	})
}
