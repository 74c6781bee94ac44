package main

// Python-based backends end to end: testdata/backends/textgen serves
// testdata/models/textgen_model, laid out as Triton's vLLM backend's models
// are (a config naming the backend, model.json in the version directory),
// found through --backend-directory or the repository's own backends/.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

func TestPythonBasedBackend(t *testing.T) {
	ipctest.RequirePython(t)
	backends, err := filepath.Abs(filepath.Join("..", "..", "testdata", "backends"))
	if err != nil {
		t.Fatal(err)
	}
	inRepo := copyRepo(t, "textgen_model")
	if err := os.CopyFS(filepath.Join(inRepo, "backends"), os.DirFS(backends)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		repo string
		dir  string // --backend-directory
	}{
		{"from --backend-directory", copyRepo(t, "textgen_model"), backends},
		{"from the repository's backends/", inRepo, t.TempDir()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServer(t, tc.repo, "--backend-directory", tc.dir)
			var cfg struct {
				Backend string `json:"backend"`
				Policy  struct {
					Decoupled bool `json:"decoupled"`
				} `json:"model_transaction_policy"`
				Input []struct {
					Name string `json:"name"`
				} `json:"input"`
			}
			s.getJSON("/v2/models/textgen_model/config", &cfg)
			var inputs []string
			for _, in := range cfg.Input {
				inputs = append(inputs, in.Name)
			}
			if cfg.Backend != "textgen" || !cfg.Policy.Decoupled || !slices.Equal(inputs, []string{"text_input", "stream", "sampling_parameters", "exclude_input_in_output"}) {
				t.Errorf("config as the backend completed it: %+v", cfg)
			}
			code, body := s.postJSON("/v2/models/textgen_model/generate", map[string]any{
				"text_input": "hello world", "sampling_parameters": `{"max_tokens":3}`})
			var out struct {
				Text string `json:"text_output"`
			}
			if code != 200 || json.Unmarshal(body, &out) != nil || out.Text != "hello world ~hello ~world ~hello" {
				t.Fatalf("generate: %d %s", code, body)
			}
			// With optional inputs, Triton's text names the range.
			code, body = s.postJSON("/v2/models/textgen_model/generate", map[string]any{})
			if want := "expected number of inputs between 1 and 4 but got 0 inputs for model 'textgen_model'. Got input(s) [], but missing required input(s) ['text_input']. Please provide all required input(s)."; code != 400 || httpErrorText(t, body) != want {
				t.Errorf("generate without inputs: %d %s, want 400 %q", code, body, want)
			}
			st := curlSSE(t, s, "/v2/models/textgen_model/generate_stream", `{"text_input":"a b","stream":true,"sampling_parameters":"{\"max_tokens\":3}"}`)
			var toks []string
			for _, ev := range st.all() {
				tok, _ := ev["text_output"].(string)
				toks = append(toks, tok)
			}
			if got := strings.Join(toks, ""); got != "~a ~b ~a " {
				t.Fatalf("streamed tokens %q", got)
			}
			if log := s.Log(); !strings.Contains(log, "textgen: model toy-textgen loaded from "+filepath.Join(tc.repo, "textgen_model", "1", "model.json")) {
				t.Errorf("the backend did not read the version's model.json:\n%s", log)
			}
		})
	}
	t.Run("unknown backend", func(t *testing.T) {
		repo := t.TempDir()
		if err := os.MkdirAll(filepath.Join(repo, "nosuch_model", "1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, "nosuch_model", "config.pbtxt"), []byte(`backend: "nosuch"`), 0o644); err != nil {
			t.Fatal(err)
		}
		s := startServer(t, repo, "--backend-directory", backends, "--model-control-mode", "explicit")
		code, body := s.postJSON("/v2/repository/models/nosuch_model/load", map[string]any{})
		want := "failed to load 'nosuch_model': unable to find backend library for backend 'nosuch', try specifying runtime on the model configuration."
		// UNSUPPORTED, as modelconfig.Validate answers for any backend it cannot run.
		if code != 501 || httpErrorText(t, body) != want {
			t.Errorf("load: %d %s, want 501 %q", code, body, want)
		}
	})
}
