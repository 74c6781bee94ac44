package openai

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The chat templates of Meta-Llama-3-8B-Instruct and
// Mistral-7B-Instruct-v0.1, from their tokenizer_config.json files
// (testdata/hf), render the conversations of their documentation exactly:
// Llama 3's prompt format in Meta's model card, and Mistral's in Hugging
// Face's chat templating guide.
func TestHuggingFaceTemplates(t *testing.T) {
	for _, tc := range []struct {
		name, config, messages, want string
	}{
		{
			name:     "llama3 system and user",
			config:   "llama3_tokenizer_config.json",
			messages: `[{"role": "system", "content": "You are a helpful AI assistant for travel tips and recommendations"}, {"role": "user", "content": "What is France's capital?"}]`,
			want: "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful AI assistant for travel tips and recommendations<|eot_id|>" +
				"<|start_header_id|>user<|end_header_id|>\n\nWhat is France's capital?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
		},
		{
			name:     "llama3 trims content",
			config:   "llama3_tokenizer_config.json",
			messages: `[{"role": "user", "content": "  Hi there \n"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}]`,
			want: "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>" +
				"<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
		},
		{
			name:   "mistral conversation",
			config: "mistral_tokenizer_config.json",
			messages: `[{"role": "user", "content": "Hello, how are you?"}, {"role": "assistant", "content": "I'm doing great. How can I help you today?"},
				{"role": "user", "content": "I'd like to show off how chat templating works!"}]`,
			want: "<s>[INST] Hello, how are you? [/INST]I'm doing great. How can I help you today?</s> [INST] I'd like to show off how chat templating works! [/INST]",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct := loadTestTemplate(t, tc.config)
			got, err := ct.render(renderInput{messages: json.RawMessage(tc.messages)})
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("rendered\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
	t.Run("mistral raise_exception", func(t *testing.T) {
		ct := loadTestTemplate(t, "mistral_tokenizer_config.json")
		_, err := ct.render(renderInput{messages: json.RawMessage(`[{"role": "system", "content": "x"}]`)})
		if err == nil || !strings.Contains(err.Error(), "Conversation roles must alternate user/assistant/user/assistant/...") || statusOf(err) != 400 {
			t.Errorf("got %v", err)
		}
	})
}

func loadTestTemplate(t *testing.T, name string) *chatTemplate {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join("testdata", "hf", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	ct, err := loadChatTemplate(dir)
	if err != nil || ct.isDefault {
		t.Fatalf("load %s: %v (default %v)", name, err, ct != nil && ct.isDefault)
	}
	return ct
}

// What a template is given, beyond messages, matches Hugging Face's
// apply_chat_template: tools in the client's key order through tojson,
// text parts joined, tool call arguments as objects, Jinja's loop and
// namespace, and the fallback template.
func TestTemplateInputs(t *testing.T) {
	for _, tc := range []struct {
		name, src, messages, tools, want string
	}{
		{"tools keep key order", `{{ tools[0] | tojson }}`, `[{"role": "user", "content": "x"}]`,
			`[{"type": "function", "function": {"name": "f", "parameters": {"b": 1, "a": [true, null, 2.5]}}}]`,
			`{"type": "function", "function": {"name": "f", "parameters": {"b": 1, "a": [true, null, 2.5]}}}`},
		{"tojson indent", `{{ tools[0].function | tojson(indent=2) }}`, `[{"role": "user", "content": "x"}]`,
			`[{"type": "function", "function": {"name": "f"}}]`, "{\n  \"name\": \"f\"\n}"},
		{"no tools is undefined", `{{ tools is defined }}`, `[{"role": "user", "content": "x"}]`, ``, `False`},
		{"content parts", `{{ messages[0].content }}`, `[{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]`, ``, "a\nb"},
		{"null content", `[{{ messages[0].content }}]`, `[{"role": "assistant", "content": null}]`, ``, "[]"},
		{"tool call arguments", `{{ messages[0].tool_calls[0].function.arguments | tojson }}`,
			`[{"role": "assistant", "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{\"city\": \"Paris\"}"}}]}]`, ``, `{"city": "Paris"}`},
		{"loop and namespace", `{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ loop.index }}{{ '.' if not loop.last }}{% endfor %}={{ ns.n }}`,
			`[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]`, ``, "1.2.3=3"},
		{"loop first and revindex", `{% for m in messages %}{{ 'F' if loop.first }}{{ loop.revindex }}{{ loop.index0 }}{% endfor %}`,
			`[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]`, ``, "F2011"},
		{"fallback", fallbackTemplate, `[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]`, ``,
			"system: Be brief.\nuser: Hi\nassistant: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct, err := compileChatTemplate(tc.src, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ct.render(renderInput{messages: json.RawMessage(tc.messages), tools: json.RawMessage(tc.tools)})
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// strftime_now is Python's strftime of the current time, which Llama 3.1's
// template uses for "Today Date: 26 Jul 2024".
func TestTemplateStrftimeNow(t *testing.T) {
	ct, err := compileChatTemplate(`{{ strftime_now("%d %b %Y") }}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // a render that straddles midnight is retried once
		before := time.Now().Format("02 Jan 2006")
		got, err := ct.render(renderInput{messages: json.RawMessage(`[{"role": "user", "content": "x"}]`)})
		if err != nil {
			t.Fatal(err)
		}
		if after := time.Now().Format("02 Jan 2006"); before == after {
			if got != before {
				t.Errorf("strftime_now = %q, want %q", got, before)
			}
			return
		}
	}
}
