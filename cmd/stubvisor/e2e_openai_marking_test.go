package main

import (
	"strings"
	"testing"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// The model config parameter "openai" lists a model that is not decoupled
// ("true") and hides a decoupled one ("false"), which is then refused.
func TestOpenAIModelMarking(t *testing.T) {
	ipctest.RequirePython(t)
	repo := t.TempDir()
	base := strings.Replace(trtllmConfig, "max_batch_size: 4", "max_batch_size: 0", 1)
	unary := strings.Replace(strings.Replace(base, "model_transaction_policy { decoupled: true }", `parameters { key: "openai" value { string_value: "true" } }`, 1),
		`name: "tiny_lm_trtllm"`, `name: "tiny_unary"`, 1)
	plain := strings.Replace(strings.Replace(base, "model_transaction_policy { decoupled: true }", "", 1), `name: "tiny_lm_trtllm"`, `name: "tiny_plain"`, 1)
	hidden := strings.Replace(base+`parameters { key: "openai" value { string_value: "false" } }`+"\n", `name: "tiny_lm_trtllm"`, `name: "tiny_hidden"`, 1)
	for name, cfg := range map[string]string{"tiny_unary": unary, "tiny_plain": plain, "tiny_hidden": hidden} {
		tinyLMVariant(t, repo, name, cfg, map[string]string{})
	}
	s := startServer(t, repo, "--openai-port", "0")
	_, list := s.oaiDo("GET", "/v1/models", nil)
	if data, _ := at(list, "data").([]any); len(data) != 1 || atStr(list, "data", 0, "id") != "tiny_unary" {
		t.Fatalf("listed %v, want only tiny_unary", list)
	}
	for _, tc := range []struct {
		model string
		code  int
	}{{"tiny_unary", 200}, {"tiny_plain", 200}, {"tiny_hidden", 404}} {
		code, m := s.oaiDo("POST", "/v1/completions", map[string]any{"model": tc.model, "prompt": "The ", "max_tokens": 3})
		if code != tc.code || (code == 200 && len(atStr(m, "choices", 0, "text")) != 3) {
			t.Errorf("%s: %d %v, want %d", tc.model, code, m, tc.code)
		}
	}
}
