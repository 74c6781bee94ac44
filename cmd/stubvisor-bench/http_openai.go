package main

// The OpenAI case of the http benchmark: token_gen streams 64 tokens per
// request to 16 concurrent clients through /v1/chat/completions (stream:
// true, the model's default chat template) and, in alternating rounds on
// the same server, through generate_stream. tokens_per_s counts the chunks
// that carry content; the ratio is the chat stream's rate over
// generate_stream's.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"time"
)

const openAIStreamCase = "openai-chat-stream-64tokens-c16"

// chatStreamOne sends one streaming chat request and counts the chunks
// with content.
func chatStreamOne(cl *http.Client, url string, body []byte) (int, time.Duration, error) {
	t0 := time.Now()
	resp, err := cl.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("chat stream: status %d", resp.StatusCode)
	}
	rd := bufio.NewReader(resp.Body)
	var first time.Duration
	n, done := 0, false
	for {
		line, err := rd.ReadSlice('\n')
		if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			switch {
			case bytes.HasPrefix(data, []byte(`{"error"`)):
				return n, 0, fmt.Errorf("chat stream: %s", data)
			case bytes.HasPrefix(data, []byte("[DONE]")):
				done = true
			case bytes.Contains(data, []byte(`"delta":{"content":"`)) && !bytes.Contains(data, []byte(`"delta":{"content":""`)):
				if n == 0 {
					first = time.Since(t0)
				}
				n++
			}
		}
		if err != nil {
			break
		}
	}
	if n != streamTokens || !done {
		return n, 0, fmt.Errorf("chat stream: %d tokens (done %v), want %d", n, done, streamTokens)
	}
	return n, first, nil
}

// runOpenAIStreamCase measures the OpenAI chat stream against
// generate_stream on srv (started with an OpenAI listener) and prints both
// and their ratio.
func runOpenAIStreamCase(srv *benchServer, rounds int, warmup, d time.Duration) error {
	chatURL := "http://" + srv.addrs["OpenAI"] + "/v1/chat/completions"
	chatBody := fmt.Appendf(nil, `{"model":"token_gen","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, streamTokens, streamPrompt)
	genURL := srv.url() + "/v2/models/token_gen/generate_stream"
	genBody := fmt.Appendf(nil, `{"text_input":%q,"max_tokens":%d}`, streamPrompt, streamTokens)
	side := func(one func(cl *http.Client) (int, time.Duration, error)) func() (Stats, error) {
		return func() (Stats, error) {
			tr := &http.Transport{MaxIdleConnsPerHost: streamConns, MaxConnsPerHost: streamConns, DisableCompression: true}
			defer tr.CloseIdleConnections()
			cl := &http.Client{Transport: tr}
			return runStream(warmup, d, func(context.Context, int) (int, time.Duration, error) { return one(cl) })
		}
	}
	chat := side(func(cl *http.Client) (int, time.Duration, error) { return chatStreamOne(cl, chatURL, chatBody) })
	gen := side(func(cl *http.Client) (int, time.Duration, error) { return sseOne(cl, genURL, genBody) })
	a, b, ratio, err := alternate(rounds, chat, gen)
	if err != nil {
		return err
	}
	fmt.Printf("http %s tokens_per_s=%.0f first_token_p50_us=%.0f\n", openAIStreamCase, a.PerSecond, float64(a.P50)/float64(time.Microsecond))
	fmt.Printf("http generate_stream-64tokens-c16 (same rounds) tokens_per_s=%.0f first_token_p50_us=%.0f\n", b.PerSecond, float64(b.P50)/float64(time.Microsecond))
	fmt.Printf("http ratio %s vs_generate_stream=%.3f\n", openAIStreamCase, ratio)
	return nil
}
