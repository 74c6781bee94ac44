package main

import (
	"path/filepath"
	"testing"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// The OpenAI API's model requests are traced like the KServe front end's
// (--trace-config): a chat request with n = 2 leaves two traces of
// tiny_lm, each with the front end's and the backend's timestamps.
func TestOpenAITrace(t *testing.T) {
	ipctest.RequirePython(t)
	file := filepath.Join(t.TempDir(), "trace.json")
	s := startServer(t, copyRepo(t, "tiny_lm"), "--openai-port", "0", "--trace-config", "triton,file="+file,
		"--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1")
	code, body := s.oaiDo("POST", "/v1/chat/completions", map[string]any{"model": "tiny_lm", "n": 2, "max_tokens": 3,
		"messages": []map[string]any{{"role": "user", "content": "Hello"}}})
	if code != 200 {
		t.Fatalf("chat: %d %v", code, body)
	}
	s.Stop() // the trace file is written at shutdown
	traces := readTraceFile(t, file)
	if len(traces) != 2 {
		t.Fatalf("%d traces, want 2", len(traces))
	}
	for id, tr := range traces {
		if tr.header.ModelName != "tiny_lm" {
			t.Errorf("trace %d: model %q", id, tr.header.ModelName)
		}
		for _, name := range []string{"HTTP_RECV_START", "REQUEST_START", "QUEUE_START", "COMPUTE_START", "REQUEST_END"} {
			if tr.ns[name] == 0 {
				t.Errorf("trace %d has no %s: %v", id, name, tr.names)
			}
		}
		if tr.ns["REQUEST_END"] < tr.ns["REQUEST_START"] {
			t.Errorf("trace %d ends before it starts: %v", id, tr.ns)
		}
	}
}
