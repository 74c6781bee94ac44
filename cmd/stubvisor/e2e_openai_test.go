package main

// End-to-end tests of the OpenAI-compatible API (--openai-port): the
// built binary serves testdata's tiny_lm (a character 4-gram model, vLLM
// layout), a TRT-LLM-layout copy of it, tiny_embed, and token_gen behind a
// chat template that makes it answer tool calls. Every behaviour is read
// off real responses: usage counts are characters, so they are checked
// against the prompt and the text.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// llama3Tokenizer is Meta-Llama-3-8B-Instruct's tokenizer_config.json
// (its chat template and tokens), shipped as test data.
const llama3Tokenizer = "../../server/openai/testdata/hf/llama3_tokenizer_config.json"

// toolTemplate makes token_gen's prompt the last message, and counts the
// tools the template was given, so that the model echoes a tool call.
const toolTemplate = `{"chat_template": "{{ messages[-1]['content'] }}{% if tools is defined %}{{ ' ' }}{{ tools | length }}{% endif %}"}`

func startOpenAI(t *testing.T) *server {
	t.Helper()
	ipctest.RequirePython(t)
	repo := copyRepo(t, "tiny_lm", "tiny_embed", "token_gen")
	tinyLMVariant(t, repo, "tiny_lm_trtllm", trtllmConfig, map[string]string{})
	llama, err := os.ReadFile(llama3Tokenizer)
	if err != nil {
		t.Fatal(err)
	}
	tinyLMVariant(t, repo, "tiny_llama", strings.Replace(mustRead(t, "../../testdata/models/tiny_lm/config.pbtxt"), `name: "tiny_lm"`, `name: "tiny_llama"`, 1),
		map[string]string{"tokenizer_config.json": string(llama), "1/multi_lora.json": `{"alpha": "alpha", "beta": "beta"}`})
	if err := os.WriteFile(filepath.Join(repo, "token_gen", "tokenizer_config.json"), []byte(toolTemplate), 0o644); err != nil {
		t.Fatal(err)
	}
	return startServer(t, repo, "--openai-port", "0", "--lora-separator", "::", "--tool-call-parser", "llama3")
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestOpenAIModels(t *testing.T) {
	s := startOpenAI(t)
	code, list := s.oaiDo("GET", "/v1/models", nil)
	var ids []string
	for _, m := range at(list, "data").([]any) {
		ids = append(ids, atStr(m, "id"))
		if atStr(m, "object") != "model" || atStr(m, "owned_by") != "Triton Inference Server" || atInt(m, "created") == 0 {
			t.Errorf("model entry %v", m)
		}
	}
	want := "tiny_embed tiny_llama tiny_llama::alpha tiny_llama::beta tiny_lm tiny_lm_trtllm token_gen"
	if code != 200 || strings.Join(ids, " ") != want {
		t.Fatalf("GET /v1/models: %d %v, want ids %s", code, ids, want)
	}
	for _, tc := range []struct {
		id   string
		code int
	}{{"tiny_lm", 200}, {"tiny_llama::beta", 200}, {"no_such_model", 404}, {"tiny_llama::gamma", 404}} {
		code, m := s.oaiDo("GET", "/v1/models/"+tc.id, nil)
		if code != tc.code || (code == 200 && atStr(m, "id") != tc.id) || (code == 404 && atStr(m, "error", "code") != "model_not_found") {
			t.Errorf("GET /v1/models/%s: %d %v, want %d", tc.id, code, m, tc.code)
		}
	}
	if code, _ := s.oaiDo("GET", "/health/ready", nil); code != 200 {
		t.Errorf("/health/ready: %d", code)
	}
	resp, err := http.Get(s.OpenAI + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/metrics: %d", resp.StatusCode)
	}
}

func TestOpenAICompletions(t *testing.T) {
	s := startOpenAI(t)
	const prompt = "The keeper "
	for _, model := range []string{"tiny_lm", "tiny_lm_trtllm"} {
		t.Run(model, func(t *testing.T) {
			req := map[string]any{"model": model, "prompt": prompt, "max_tokens": 24, "temperature": 0}
			code, a := s.oaiDo("POST", "/v1/completions", req)
			text := atStr(a, "choices", 0, "text")
			if code != 200 || atStr(a, "object") != "text_completion" || len([]rune(text)) != 24 || atStr(a, "choices", 0, "finish_reason") != "length" {
				t.Fatalf("greedy completion: %d %v", code, a)
			}
			if u := at(a, "usage"); atInt(u, "prompt_tokens") != len(prompt) || atInt(u, "completion_tokens") != 24 || atInt(u, "total_tokens") != len(prompt)+24 {
				t.Errorf("usage %v, want %d + 24", u, len(prompt))
			}
			// Greedy decoding is deterministic, and a stop string ends the
			// text before it.
			_, b := s.oaiDo("POST", "/v1/completions", req)
			if atStr(b, "choices", 0, "text") != text {
				t.Errorf("greedy completions differ: %q, %q", text, atStr(b, "choices", 0, "text"))
			}
			stop := text[5:7]
			req["stop"] = []string{stop}
			_, c := s.oaiDo("POST", "/v1/completions", req)
			if got := atStr(c, "choices", 0, "text"); got != text[:strings.Index(text, stop)] || atStr(c, "choices", 0, "finish_reason") != "stop" {
				t.Errorf("stop %q: %q (%s), want %q", stop, got, atStr(c, "choices", 0, "finish_reason"), text[:strings.Index(text, stop)])
			}
			// n choices, seeded: repeatable, and not all alike.
			seeded := map[string]any{"model": model, "prompt": prompt, "max_tokens": 30, "n": 3, "seed": 7, "temperature": 1.5}
			_, d := s.oaiDo("POST", "/v1/completions", seeded)
			_, e := s.oaiDo("POST", "/v1/completions", seeded)
			choices, _ := at(d, "choices").([]any)
			if len(choices) != 3 || atInt(d, "usage", "completion_tokens") != 90 {
				t.Fatalf("n=3: %v", d)
			}
			texts := map[string]bool{}
			for i := range 3 {
				texts[atStr(d, "choices", i, "text")] = true
				if atInt(d, "choices", i, "index") != i || atStr(d, "choices", i, "text") != atStr(e, "choices", i, "text") {
					t.Errorf("choice %d: %v vs %v", i, at(d, "choices", i), at(e, "choices", i))
				}
			}
			if len(texts) < 2 {
				t.Errorf("3 sampled choices are all %v", texts)
			}
		})
	}
	t.Run("streaming", func(t *testing.T) {
		st := s.oaiStreamPost("/v1/completions", map[string]any{"model": "tiny_lm", "prompt": prompt, "max_tokens": 12, "temperature": 0,
			"stream": true, "stream_options": map[string]any{"include_usage": true}})
		_, whole := s.oaiDo("POST", "/v1/completions", map[string]any{"model": "tiny_lm", "prompt": prompt, "max_tokens": 12, "temperature": 0})
		n := len(st.events)
		if st.status != 200 || !st.done || n < 13 {
			t.Fatalf("stream: %d, done %v, %d events: %v", st.status, st.done, n, st.events)
		}
		var text string
		for _, ev := range st.events[:n-1] {
			text += atStr(ev, "choices", 0, "text")
		}
		if text != atStr(whole, "choices", 0, "text") || atStr(st.events[n-2], "choices", 0, "finish_reason") != "length" {
			t.Errorf("streamed %q, whole %q", text, atStr(whole, "choices", 0, "text"))
		}
		if u := st.events[n-1]; len(at(u, "choices").([]any)) != 0 || atInt(u, "usage", "completion_tokens") != 12 || atInt(u, "usage", "prompt_tokens") != len(prompt) {
			t.Errorf("usage chunk %v", u)
		}
	})
	t.Run("logprobs", func(t *testing.T) {
		_, a := s.oaiDo("POST", "/v1/completions", map[string]any{"model": "tiny_lm", "prompt": prompt, "max_tokens": 5, "logprobs": 2, "temperature": 0})
		lp := at(a, "choices", 0, "logprobs")
		tokens, _ := at(lp, "tokens").([]any)
		var joined string
		for _, tok := range tokens {
			joined += tok.(string)
		}
		if len(tokens) != 5 || joined != atStr(a, "choices", 0, "text") || len(at(lp, "top_logprobs").([]any)) != 5 {
			t.Errorf("logprobs %v of %q", lp, atStr(a, "choices", 0, "text"))
		}
	})
}

func TestOpenAIChat(t *testing.T) {
	s := startOpenAI(t)
	msgs := []map[string]any{{"role": "system", "content": "You are a lighthouse keeper."}, {"role": "user", "content": "What do you see?"}}
	// The Llama 3 template renders these messages as Meta documents the
	// prompt format; tiny_lm counts its characters.
	rendered := "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a lighthouse keeper.<|eot_id|>" +
		"<|start_header_id|>user<|end_header_id|>\n\nWhat do you see?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
	// Without a template the fallback renders "<role>: <content>\n" lines.
	fallback := "system: You are a lighthouse keeper.\nuser: What do you see?\nassistant: "
	for _, tc := range []struct{ model, prompt string }{{"tiny_llama", rendered}, {"tiny_llama::alpha", rendered}, {"tiny_lm", fallback}} {
		t.Run(tc.model, func(t *testing.T) {
			req := map[string]any{"model": tc.model, "messages": msgs, "max_completion_tokens": 10, "temperature": 0}
			code, a := s.oaiDo("POST", "/v1/chat/completions", req)
			content := atStr(a, "choices", 0, "message", "content")
			if code != 200 || atStr(a, "object") != "chat.completion" || atStr(a, "choices", 0, "message", "role") != "assistant" || len([]rune(content)) != 10 {
				t.Fatalf("chat: %d %v", code, a)
			}
			if atInt(a, "usage", "prompt_tokens") != len([]rune(tc.prompt)) {
				t.Errorf("prompt_tokens %d, want %d (the rendered prompt's characters)", atInt(a, "usage", "prompt_tokens"), len([]rune(tc.prompt)))
			}
			req["stream"] = true
			st := s.oaiStreamPost("/v1/chat/completions", req)
			if st.status != 200 || !st.done || len(st.events) < 2 || atStr(st.events[0], "choices", 0, "delta", "role") != "assistant" {
				t.Fatalf("chat stream: %+v", st)
			}
			var streamed string
			for _, ev := range st.events[1:] {
				streamed += atStr(ev, "choices", 0, "delta", "content")
				if atStr(ev, "object") != "chat.completion.chunk" {
					t.Errorf("chunk %v", ev)
				}
			}
			if streamed != content || atStr(st.events[len(st.events)-1], "choices", 0, "finish_reason") != "length" {
				t.Errorf("streamed %q, whole %q; last %v", streamed, content, st.events[len(st.events)-1])
			}
		})
	}
	t.Run("tool call", func(t *testing.T) {
		call := `{"name": "get_weather", "parameters": {"city": "Paris"}}`
		tools := []map[string]any{{"type": "function", "function": map[string]any{"name": "get_weather", "parameters": map[string]any{"type": "object"}}}}
		// token_gen sends the prompt's words back; the template appends the
		// number of tools it was given ("1").
		req := map[string]any{"model": "token_gen", "messages": []map[string]any{{"role": "user", "content": call}}, "tools": tools, "max_tokens": 5}
		code, a := s.oaiDo("POST", "/v1/chat/completions", req)
		tc := at(a, "choices", 0, "message", "tool_calls", 0)
		if code != 200 || atStr(a, "choices", 0, "finish_reason") != "tool_calls" || atStr(tc, "function", "name") != "get_weather" ||
			atStr(tc, "function", "arguments") != `{"city":"Paris"}` || atStr(tc, "type") != "function" || atStr(tc, "id") == "" {
			t.Fatalf("tool call: %d %v", code, a)
		}
		req["max_tokens"] = 6
		_, b := s.oaiDo("POST", "/v1/chat/completions", req)
		if atStr(b, "choices", 0, "message", "content") != call+" 1 " || at(b, "choices", 0, "message", "tool_calls") != nil {
			t.Errorf("text after the call is no call: %v", b)
		}
		req["max_tokens"], req["stream"] = 5, true
		st := s.oaiStreamPost("/v1/chat/completions", req)
		last := st.events[len(st.events)-1]
		if !st.done || atStr(last, "choices", 0, "finish_reason") != "tool_calls" || atStr(last, "choices", 0, "delta", "tool_calls", 0, "function", "arguments") != `{"city":"Paris"}` {
			t.Errorf("streamed tool call: %v", st.events)
		}
		// A named tool_choice makes the whole output the function's
		// arguments; streamed, the first chunk names the function.
		named := map[string]any{"model": "token_gen", "messages": []map[string]any{{"role": "user", "content": `{"city": "Oslo"}`}}, "tools": tools,
			"tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}, "max_tokens": 2}
		_, c := s.oaiDo("POST", "/v1/chat/completions", named)
		if tc := at(c, "choices", 0, "message", "tool_calls", 0); atStr(tc, "function", "name") != "get_weather" || atStr(tc, "function", "arguments") != `{"city": "Oslo"} ` {
			t.Errorf("named tool choice: %v", c)
		}
		named["stream"] = true
		st = s.oaiStreamPost("/v1/chat/completions", named)
		var args string
		for i, ev := range st.events[1:] {
			tc := at(ev, "choices", 0, "delta", "tool_calls", 0)
			if tc == nil {
				continue
			}
			args += atStr(tc, "function", "arguments")
			if (i == 0) != (atStr(tc, "function", "name") == "get_weather" && atStr(tc, "id") != "") {
				t.Errorf("chunk %d: %v", i, tc)
			}
		}
		if args != `{"city": "Oslo"} ` {
			t.Errorf("streamed arguments %q: %v", args, st.events)
		}
	})
}

func TestOpenAIErrors(t *testing.T) {
	s := startOpenAI(t)
	for _, tc := range []struct {
		name, path string
		body       map[string]any
		code       int
		param      string
	}{
		{"unknown model", "/v1/completions", map[string]any{"model": "nope", "prompt": "x"}, 404, "model"},
		{"unknown chat model", "/v1/chat/completions", map[string]any{"model": "nope", "messages": []any{map[string]any{"role": "user", "content": "x"}}}, 404, "model"},
		{"unknown LoRA", "/v1/completions", map[string]any{"model": "tiny_llama::gamma", "prompt": "x"}, 400, "model"},
		{"temperature", "/v1/completions", map[string]any{"model": "tiny_lm", "prompt": "x", "temperature": 3}, 400, "temperature"},
		{"top_p", "/v1/completions", map[string]any{"model": "tiny_lm", "prompt": "x", "top_p": -1}, 400, "top_p"},
		{"n", "/v1/completions", map[string]any{"model": "tiny_lm", "prompt": "x", "n": 0}, 400, "n"},
		{"max_tokens", "/v1/completions", map[string]any{"model": "tiny_lm", "prompt": "x", "max_tokens": 0}, 400, "max_tokens"},
		{"empty prompt", "/v1/completions", map[string]any{"model": "tiny_lm", "prompt": ""}, 400, "prompt"},
		{"stop type", "/v1/completions", map[string]any{"model": "tiny_lm", "prompt": "x", "stop": 5}, 400, "stop"},
		{"stream_options without stream", "/v1/completions", map[string]any{"model": "tiny_lm", "prompt": "x", "stream_options": map[string]any{"include_usage": true}}, 400, "stream_options"},
		{"logprobs on TRT-LLM", "/v1/completions", map[string]any{"model": "tiny_lm_trtllm", "prompt": "x", "logprobs": 1}, 400, "logprobs"},
		{"no messages", "/v1/chat/completions", map[string]any{"model": "tiny_lm"}, 400, "messages"},
		{"template refuses", "/v1/chat/completions", map[string]any{"model": "tiny_lm", "messages": []any{map[string]any{"content": "x"}}}, 400, "messages"},
		{"named tool not in tools", "/v1/chat/completions", map[string]any{"model": "tiny_lm", "messages": []any{map[string]any{"role": "user", "content": "x"}},
			"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "f"}}}, "tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "g"}}}, 400, "tool_choice"},
		{"embedding of a generator", "/v1/embeddings", map[string]any{"model": "tiny_lm", "input": "x"}, 400, "model"},
		{"generation of an embedder", "/v1/completions", map[string]any{"model": "tiny_embed", "prompt": "x"}, 400, "model"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, m := s.oaiDo("POST", tc.path, tc.body)
			if code != tc.code || atStr(m, "error", "message") == "" || atStr(m, "error", "param") != tc.param || atStr(m, "error", "type") == "" {
				t.Errorf("%d %v, want %d with param %q", code, m, tc.code, tc.param)
			}
		})
	}
	t.Run("malformed JSON", func(t *testing.T) {
		resp, err := http.Post(s.OpenAI+"/v1/chat/completions", "application/json", strings.NewReader(`{"model": `))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if resp.StatusCode != 400 || atStr(m, "error", "type") != "invalid_request_error" {
			t.Errorf("%d %v", resp.StatusCode, m)
		}
	})
	t.Run("model error mid-stream", func(t *testing.T) {
		st := s.oaiStreamPost("/v1/chat/completions", map[string]any{"model": "tiny_lm", "stream": true, "max_tokens": 20,
			"messages": []any{map[string]any{"role": "user", "content": "#fail"}}})
		if st.status != 200 || len(st.events) != 5 || !st.done {
			t.Fatalf("%+v", st)
		}
		if msg := atStr(st.events[4], "error", "message"); msg != "tiny_lm: failed after 3 tokens, as the prompt asked" {
			t.Errorf("error event %v", st.events[4])
		}
	})
}

func TestOpenAIEmbeddings(t *testing.T) {
	s := startOpenAI(t)
	code, a := s.oaiDo("POST", "/v1/embeddings", map[string]any{"model": "tiny_embed", "input": []string{"the lighthouse", "the lighthouses", "zebra"}})
	data, _ := at(a, "data").([]any)
	if code != 200 || len(data) != 3 || atInt(a, "usage", "prompt_tokens") != len("the lighthouse")+len("the lighthouses")+len("zebra") {
		t.Fatalf("%d %v", code, a)
	}
	vec := func(i int) []float64 {
		var v []float64
		for _, x := range at(a, "data", i, "embedding").([]any) {
			v = append(v, x.(float64))
		}
		return v
	}
	dot := func(x, y []float64) (d float64) {
		for i := range x {
			d += x[i] * y[i]
		}
		return d
	}
	if len(vec(0)) != 64 || dot(vec(0), vec(1)) <= dot(vec(0), vec(2)) {
		t.Errorf("similar texts are not closer: %v %v", dot(vec(0), vec(1)), dot(vec(0), vec(2)))
	}
	_, b := s.oaiDo("POST", "/v1/embeddings", map[string]any{"model": "tiny_embed", "input": "x", "dimensions": 8, "encoding_format": "base64"})
	if e := atStr(b, "data", 0, "embedding"); len(e) != 44 { // 8 float32s
		t.Errorf("base64 embedding %q", e)
	}
}

func TestOpenAIDisconnectCancels(t *testing.T) {
	s := startOpenAI(t)
	body, _ := json.Marshal(map[string]any{"model": "tiny_lm", "stream": true, "max_tokens": 2000, "prompt": "#slow"})
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	resp, err := (&http.Client{Transport: tr}).Post(s.OpenAI+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "data: ") {
		t.Fatalf("first event: %q", sc.Text())
	}
	resp.Body.Close() // hang up mid-stream
	waitLog(t, s, "cancelled after")
	if !strings.Contains(s.Log(), "tiny_lm: request") {
		t.Errorf("the model did not log its cancellation:\n%s", s.Log())
	}
	// The model is free again.
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if code, _ := s.oaiDo("POST", "/v1/completions", map[string]any{"model": "tiny_lm", "prompt": "x", "max_tokens": 1}); code == 200 {
			return
		}
	}
	t.Fatal("tiny_lm did not serve after the cancelled request")
}

// TestOpenAINodeClient drives the API with OpenAI's official Node client
// (npm package openai, pinned by testdata/openai/package-lock.json): the
// script covers models, completions, chat (stream and not), usage, stop,
// n > 1, an error mid-stream, an unknown model, bad parameters,
// embeddings, and a client that disconnects, whose cancellation the model
// logs.
func TestOpenAINodeClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the OpenAI Node client test needs node and npm (make deps installs them)")
	}
	dir, err := filepath.Abs(filepath.Join("testdata", "openai"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json")); err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci: %v\n%s", err, out)
		}
	}
	s := startOpenAI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "openai.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+s.OpenAI+"/v1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "node client: disconnected mid-stream") {
		t.Fatalf("the disconnect test did not run:\n%s", out)
	}
	t.Logf("node --test:\n%s", out)
	waitLog(t, s, "cancelled after")
}
