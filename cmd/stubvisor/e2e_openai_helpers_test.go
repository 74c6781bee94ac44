package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Helpers of the OpenAI API tests: JSON requests, Server-Sent Event
// streams, and repositories holding variants of testdata's tiny_lm.

// oaiDo sends a JSON request to the OpenAI port and decodes the answer.
func (s *server) oaiDo(method, path string, body any) (int, map[string]any) {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			s.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.OpenAI+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	var m map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &m); err != nil {
			s.t.Fatalf("%s %s: status %d, body %q is not JSON: %v", method, path, resp.StatusCode, raw, err)
		}
	}
	return resp.StatusCode, m
}

// oaiStream is a streaming answer: its status, its events in order and
// whether it ended with [DONE].
type oaiStream struct {
	status int
	events []map[string]any
	done   bool
	body   map[string]any // the JSON answer of a stream refused at once
}

// oaiStreamPost POSTs a streaming request and reads the whole stream.
func (s *server) oaiStreamPost(path string, body any) oaiStream {
	s.t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		s.t.Fatal(err)
	}
	resp, err := http.Post(s.OpenAI+path, "application/json", bytes.NewReader(b))
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	st := oaiStream{status: resp.StatusCode}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		raw, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(raw, &st.body)
		return st
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			st.done = true
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			s.t.Fatalf("event %q is not JSON: %v", data, err)
		}
		st.events = append(st.events, ev)
	}
	return st
}

// at reads a nested member: at(m, "choices", 0, "text").
func at(v any, keys ...any) any {
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// atInt reads a nested number as an int.
func atInt(v any, keys ...any) int {
	f, _ := at(v, keys...).(float64)
	return int(f)
}

// atStr reads a nested string.
func atStr(v any, keys ...any) string {
	s, _ := at(v, keys...).(string)
	return s
}

// tinyLMVariant copies tiny_lm into repo as name with another config (and
// extra files, by path relative to the model directory).
func tinyLMVariant(t *testing.T, repo, name, config string, files map[string]string) {
	t.Helper()
	src := filepath.Join("..", "..", "testdata", "models", "tiny_lm")
	if err := os.CopyFS(filepath.Join(repo, name), os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	files["config.pbtxt"] = config
	for p, text := range files {
		full := filepath.Join(repo, name, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// trtllmConfig is tiny_lm with the TRT-LLM layout's tensors, batched.
const trtllmConfig = `name: "tiny_lm_trtllm"
backend: "python"
max_batch_size: 4
model_transaction_policy { decoupled: true }
input [
  { name: "text_input", data_type: TYPE_STRING, dims: [ 1 ] },
  { name: "stream", data_type: TYPE_BOOL, dims: [ 1 ], optional: true },
  { name: "max_tokens", data_type: TYPE_INT32, dims: [ 1 ] },
  { name: "temperature", data_type: TYPE_FP32, dims: [ 1 ], optional: true },
  { name: "top_p", data_type: TYPE_FP32, dims: [ 1 ], optional: true },
  { name: "seed", data_type: TYPE_UINT64, dims: [ 1 ], optional: true },
  { name: "stop_words", data_type: TYPE_STRING, dims: [ -1 ], optional: true },
  { name: "return_num_input_tokens", data_type: TYPE_BOOL, dims: [ 1 ], optional: true },
  { name: "return_num_output_tokens", data_type: TYPE_BOOL, dims: [ 1 ], optional: true }
]
output [
  { name: "text_output", data_type: TYPE_STRING, dims: [ -1 ] },
  { name: "num_input_tokens", data_type: TYPE_UINT32, dims: [ 1 ] },
  { name: "num_output_tokens", data_type: TYPE_UINT32, dims: [ 1 ] }
]
instance_group [ { count: 1, kind: KIND_CPU } ]
`
