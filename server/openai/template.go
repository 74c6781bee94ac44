package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/ardanlabs/jinja"
)

// Chat templates are Jinja, rendered as Hugging Face's apply_chat_template
// renders them: with messages, add_generation_prompt, bos_token and
// eos_token (from tokenizer_config.json), tools when the request has them,
// and raise_exception and strftime_now. The engine is
// github.com/ardanlabs/jinja, written for exactly these templates: it keeps
// a JSON object's key order (so tojson prints tools as the client sent
// them, as Python's json.dumps does), and it has Hugging Face's globals.

// fallbackTemplate is the chat template of a model without one: each
// message on its own line as "<role>: <content>", then "assistant: " to
// prompt the answer. docs/openai.md documents it.
const fallbackTemplate = `{% for message in messages %}{{ message['role'] + ': ' + message['content'] + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}`

// chatTemplate is a compiled template and the tokens it may print.
type chatTemplate struct {
	tmpl      *jinja.Template
	bosToken  string
	eosToken  string
	isDefault bool
}

// tokenizerConfig is the part of a Hugging Face tokenizer_config.json a
// template needs. Tokens are strings or AddedToken objects; chat_template
// is a string or a list of named templates.
type tokenizerConfig struct {
	ChatTemplate json.RawMessage `json:"chat_template"`
	BosToken     json.RawMessage `json:"bos_token"`
	EosToken     json.RawMessage `json:"eos_token"`
}

// errNoTemplate says a tokenizer_config.json holds no chat template.
var errNoTemplate = errors.New("no chat_template")

// loadChatTemplate compiles the chat template of the model in dir: from
// its tokenizer_config.json (in the model directory or a "tokenizer"
// directory in it), or the fallback template when there is none.
func loadChatTemplate(dir string) (*chatTemplate, error) {
	if dir != "" {
		for _, p := range []string{filepath.Join(dir, "tokenizer_config.json"), filepath.Join(dir, "tokenizer", "tokenizer_config.json")} {
			b, err := os.ReadFile(p)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("chat template: %w", err)
			}
			t, err := parseTokenizerConfig(b)
			if errors.Is(err, errNoTemplate) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("chat template: %s: %w", p, err)
			}
			return t, nil
		}
	}
	t, err := compileChatTemplate(fallbackTemplate, nil)
	if err != nil {
		return nil, err
	}
	t.isDefault = true
	return t, nil
}

// parseTokenizerConfig compiles the "default" chat template of a
// tokenizer_config.json.
func parseTokenizerConfig(b []byte) (*chatTemplate, error) {
	var tc tokenizerConfig
	if err := json.Unmarshal(b, &tc); err != nil {
		return nil, err
	}
	src, err := templateSource(tc.ChatTemplate)
	if err != nil {
		return nil, err
	}
	return compileChatTemplate(src, &tc)
}

// templateSource picks the template: a string, or the one named "default"
// of a list of {"name", "template"}.
func templateSource(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", errNoTemplate
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var named []struct{ Name, Template string }
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", fmt.Errorf("chat_template is neither a string nor a list of named templates")
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	return "", errNoTemplate
}

// tokenText reads a special token: "<s>" or {"content": "<s>", ...}.
func tokenText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var obj struct {
		Content string `json:"content"`
	}
	_ = json.Unmarshal(raw, &obj)
	return obj.Content
}

// compileChatTemplate compiles src; tc, when set, gives its tokens.
func compileChatTemplate(src string, tc *tokenizerConfig) (*chatTemplate, error) {
	t, err := jinja.Compile(src)
	if err != nil {
		return nil, err
	}
	ct := &chatTemplate{tmpl: t}
	if tc != nil {
		ct.bosToken, ct.eosToken = tokenText(tc.BosToken), tokenText(tc.EosToken)
	}
	return ct, nil
}

// renderInput is what a chat request gives the template. Messages, tools
// and extra are raw JSON, decoded in key order.
type renderInput struct {
	messages json.RawMessage
	tools    json.RawMessage // null or absent: no tools
	extra    json.RawMessage // chat_template_kwargs: more variables
}

// render renders the prompt of a chat request.
func (ct *chatTemplate) render(in renderInput) (string, error) {
	msgs, err := jsonToValue(in.messages)
	if err != nil {
		return "", badRequest("messages", "messages: %v", err)
	}
	if !msgs.IsList() || msgs.AsList().Len() == 0 {
		return "", badRequest("messages", "messages must be a non-empty array")
	}
	for _, m := range msgs.AsList().Items {
		if err := normalizeMessage(m); err != nil {
			return "", err
		}
	}
	data := map[string]jinja.Value{
		"messages":              msgs,
		"add_generation_prompt": jinja.NewBool(true),
		"bos_token":             jinja.NewString(ct.bosToken),
		"eos_token":             jinja.NewString(ct.eosToken),
	}
	if len(in.tools) > 0 && string(in.tools) != "null" {
		tools, err := jsonToValue(in.tools)
		if err != nil || !tools.IsList() {
			return "", badRequest("tools", "tools must be an array")
		}
		data["tools"] = tools
	}
	if len(in.extra) > 0 && string(in.extra) != "null" {
		kw, err := jsonToValue(in.extra)
		if err != nil || !kw.IsDict() {
			return "", badRequest("chat_template_kwargs", "chat_template_kwargs must be an object")
		}
		d := kw.AsDict()
		for _, k := range d.OrderedKeys() {
			v, _ := d.Get(k)
			data[k] = v
		}
	}
	out, err := ct.tmpl.RenderValues(data)
	if err != nil {
		// raise_exception in a template is the template refusing the
		// conversation: the client's fault, as in Hugging Face.
		return "", badRequest("messages", "chat template: %v", err)
	}
	return out, nil
}

// normalizeMessage makes a message what templates expect: a role, content
// as a string (text parts joined by newlines; null as ""), and tool call
// arguments as objects rather than JSON text, as vLLM passes them.
func normalizeMessage(m jinja.Value) error {
	if !m.IsDict() {
		return badRequest("messages", "each message must be an object")
	}
	d := m.AsDict()
	role, ok := d.Get("role")
	if !ok || !role.IsString() {
		return badRequest("messages", "each message needs a string 'role'")
	}
	content, ok := d.Get("content")
	switch {
	case !ok || content.IsNone():
		d.Set("content", jinja.NewString(""))
	case content.IsList():
		var parts []string
		for _, p := range content.AsList().Items {
			if !p.IsDict() {
				return badRequest("messages", "content parts must be objects")
			}
			if typ, _ := p.AsDict().Get("type"); typ.IsString() && typ.AsString() == "text" {
				if text, _ := p.AsDict().Get("text"); text.IsString() {
					parts = append(parts, text.AsString())
				}
			} else {
				return badRequest("messages", "only text content parts are supported")
			}
		}
		d.Set("content", jinja.NewString(strings.Join(parts, "\n")))
	case !content.IsString():
		return badRequest("messages", "message content must be a string or an array of parts")
	}
	calls, ok := d.Get("tool_calls")
	if !ok || !calls.IsList() {
		return nil
	}
	for _, c := range calls.AsList().Items {
		if !c.IsDict() {
			continue
		}
		fn, ok := c.AsDict().Get("function")
		if !ok || !fn.IsDict() {
			continue
		}
		args, ok := fn.AsDict().Get("arguments")
		if ok && args.IsString() {
			if v, err := jsonToValue(json.RawMessage(args.AsString())); err == nil {
				fn.AsDict().Set("arguments", v)
			}
		}
	}
	return nil
}

// jsonToValue decodes JSON into template values, keeping object key order.
func jsonToValue(raw json.RawMessage) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return jinja.Undefined(), err
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Undefined(), errors.New("trailing data after JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			var items []jinja.Value
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, v)
			}
			_, err := dec.Token()
			return jinja.NewList(items), err
		}
		d := jinja.NewDict()
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return jinja.Undefined(), err
			}
			v, err := decodeValue(dec)
			if err != nil {
				return jinja.Undefined(), err
			}
			d.AsDict().Set(k.(string), v)
		}
		_, err := dec.Token()
		return d, err
	case string:
		return jinja.NewString(t), nil
	case bool:
		return jinja.NewBool(t), nil
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return jinja.NewInt(i), nil
		}
		f, err := t.Float64()
		return jinja.NewFloat(f), err
	}
	return jinja.None(), nil
}
