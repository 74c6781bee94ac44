package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// A full model queue is OpenAI's 429: tiny_lm (TRT-LLM layout) behind a
// dynamic batcher that queues at most one request. One slow stream runs;
// of three more requests, one waits as the batcher's next batch, one in
// the queue, and the third is refused at once (the second too when it
// comes before the batcher took the first out of the queue). When the
// stream's client hangs up, the waiting ones run.
func TestOpenAIOverload(t *testing.T) {
	ipctest.RequirePython(t)
	repo := t.TempDir()
	cfg := strings.Replace(trtllmConfig, "max_batch_size: 4", "max_batch_size: 1\ndynamic_batching { default_queue_policy { max_queue_size: 1 } }", 1)
	tinyLMVariant(t, repo, "tiny_lm_trtllm", cfg, map[string]string{})
	s := startServer(t, repo, "--openai-port", "0")

	body, _ := json.Marshal(map[string]any{"model": "tiny_lm_trtllm", "stream": true, "max_tokens": 2000, "prompt": "#slow"})
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	resp, err := (&http.Client{Transport: tr}).Post(s.OpenAI+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if sc := bufio.NewScanner(resp.Body); !sc.Scan() || !strings.HasPrefix(sc.Text(), "data: ") {
		t.Fatalf("the slow stream did not start: %q", sc.Text())
	}

	type answer struct {
		code int
		body map[string]any
	}
	answers := make(chan answer, 3)
	for range 3 {
		go func() {
			b, _ := json.Marshal(map[string]any{"model": "tiny_lm_trtllm", "prompt": "The ", "max_tokens": 2})
			r, err := http.Post(s.OpenAI+"/v1/completions", "application/json", bytes.NewReader(b))
			if err != nil {
				answers <- answer{code: -1}
				return
			}
			defer r.Body.Close()
			var m map[string]any
			_ = json.NewDecoder(r.Body).Decode(&m)
			answers <- answer{r.StatusCode, m}
		}()
	}
	refused := func(a answer) bool {
		return a.code == http.StatusTooManyRequests && atStr(a.body, "error", "type") == "rate_limit_error" &&
			atStr(a.body, "error", "message") == "Exceeds maximum queue size"
	}
	if first := <-answers; !refused(first) {
		t.Fatalf("the request beyond the queue: %d %v, want 429", first.code, first.body)
	}
	resp.Body.Close() // the slow stream's client hangs up; the queued request runs
	// A second request that came before the batcher took the first one
	// out of the queue was refused as well; at least one ran.
	ran := 0
	for range 2 {
		switch a := <-answers; {
		case a.code == 200 && len(atStr(a.body, "choices", 0, "text")) == 2:
			ran++
		case !refused(a):
			t.Fatalf("a queued request: %d %v", a.code, a.body)
		}
	}
	if ran == 0 {
		t.Fatal("no queued request ran after the stream ended")
	}
}
