package openai

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// Tool calls: with --tool-call-parser, the text a model generates for a
// chat request with tools is read for tool calls, as Triton's frontend
// reads it (engine/utils/tool_call_parsers):
//   - llama3: the text starts with "<|python_tag|>" or "{" and is one or
//     more JSON objects {"name": ..., "arguments"|"parameters": {...}}
//     separated by "; ";
//   - mistral: the text starts with "[TOOL_CALLS]" or "[" and is a JSON
//     array of {"name": ..., "arguments": {...}}.
// Text that does not parse stays the message content. Arguments are
// returned as compact JSON text.

// toolCall is one call in a response message.
type toolCall struct {
	Index    *int         `json:"index,omitempty"` // streaming deltas only
	ID       string       `json:"id,omitempty"`    // streaming: first chunk only
	Type     string       `json:"type,omitempty"`  // streaming: first chunk only
	Function toolFunction `json:"function"`
}

type toolFunction struct {
	Name      string `json:"name,omitempty"` // streaming: first chunk only
	Arguments string `json:"arguments"`
}

// toolParser reads tool calls out of generated text.
type toolParser interface {
	// parse returns the calls in text, or ok false when it holds none.
	parse(text string) (calls []toolCall, ok bool)
	// mayStart reports whether text (all generated so far) may be the
	// start of a tool call, so a stream holds it back.
	mayStart(text string) bool
}

// newToolParser returns the parser of a --tool-call-parser name.
func newToolParser(name string) (toolParser, error) {
	switch name {
	case "":
		return nil, nil
	case "llama3":
		return llama3Parser{}, nil
	case "mistral":
		return mistralParser{}, nil
	}
	return nil, fmt.Errorf("unknown tool call parser %q (llama3 or mistral)", name)
}

const (
	llamaBotToken   = "<|python_tag|>"
	mistralBotToken = "[TOOL_CALLS]"
)

// rawCall is a call as a model writes it.
type rawCall struct {
	Name       string          `json:"name"`
	Arguments  json.RawMessage `json:"arguments"`
	Parameters json.RawMessage `json:"parameters"`
}

func (rc rawCall) toolCall(id string) (toolCall, bool) {
	args := rc.Arguments
	if len(args) == 0 {
		args = rc.Parameters
	}
	if rc.Name == "" || len(args) == 0 {
		return toolCall{}, false
	}
	var buf bytes.Buffer
	if json.Compact(&buf, args) != nil {
		return toolCall{}, false
	}
	return toolCall{ID: id, Type: "function", Function: toolFunction{Name: rc.Name, Arguments: buf.String()}}, true
}

type llama3Parser struct{}

func (llama3Parser) mayStart(text string) bool {
	t := strings.TrimLeft(text, " \n")
	return strings.HasPrefix(t, "{") || strings.HasPrefix(t, llamaBotToken) || strings.HasPrefix(llamaBotToken, t)
}

func (llama3Parser) parse(text string) ([]toolCall, bool) {
	t := strings.TrimSpace(text)
	if !strings.HasPrefix(t, llamaBotToken) && !strings.HasPrefix(t, "{") {
		return nil, false
	}
	t = strings.TrimPrefix(t, llamaBotToken)
	var calls []toolCall
	dec := json.NewDecoder(strings.NewReader(t))
	for {
		var rc rawCall
		if err := dec.Decode(&rc); err != nil {
			return nil, false
		}
		c, ok := rc.toolCall("chatcmpl-tool-" + randomHex(8))
		if !ok {
			return nil, false
		}
		calls = append(calls, c)
		rest := strings.TrimLeft(t[dec.InputOffset():], " \n")
		if rest == "" {
			return calls, true
		}
		if !strings.HasPrefix(rest, ";") {
			return nil, false
		}
		t = strings.TrimPrefix(rest, ";")
		dec = json.NewDecoder(strings.NewReader(t))
	}
}

type mistralParser struct{}

var mistralArray = regexp.MustCompile(`(?s)\[{.*}\]`)

func (mistralParser) mayStart(text string) bool {
	t := strings.TrimLeft(text, " \n")
	return strings.HasPrefix(t, "[") || strings.HasPrefix(mistralBotToken, t)
}

func (mistralParser) parse(text string) ([]toolCall, bool) {
	t := strings.TrimSpace(text)
	if !strings.HasPrefix(t, mistralBotToken) && !strings.HasPrefix(t, "[") {
		return nil, false
	}
	t = strings.TrimSpace(strings.ReplaceAll(t, mistralBotToken, ""))
	var raw []rawCall
	if json.Unmarshal([]byte(t), &raw) != nil {
		m := mistralArray.FindString(t)
		if m == "" || json.Unmarshal([]byte(m), &raw) != nil {
			return nil, false
		}
	}
	if len(raw) == 0 {
		return nil, false
	}
	calls := make([]toolCall, 0, len(raw))
	for _, rc := range raw {
		c, ok := rc.toolCall(randomAlnum(9))
		if !ok {
			return nil, false
		}
		calls = append(calls, c)
	}
	return calls, true
}

// randomHex returns n random bytes as hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// randomAlnum returns n random letters and digits (Mistral's call ids).
func randomAlnum(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// toolChoice is a chat request's tool_choice: "none", "auto", "required"
// or a named function.
type toolChoice struct {
	mode string // "", "none", "auto", "required", "named"
	name string
}

func parseToolChoice(raw json.RawMessage) (toolChoice, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return toolChoice{}, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "none", "auto", "required":
			return toolChoice{mode: s}, nil
		}
		return toolChoice{}, badRequest("tool_choice", "tool_choice must be none, auto, required or a named function, got %q", s)
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &named) != nil || named.Function.Name == "" {
		return toolChoice{}, badRequest("tool_choice", `tool_choice must be a string or {"type": "function", "function": {"name": ...}}`)
	}
	return toolChoice{mode: "named", name: named.Function.Name}, nil
}

// toolNames lists the function names of a request's tools.
func toolNames(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &tools); err != nil {
		return nil, badRequest("tools", "tools must be an array of {\"type\": \"function\", \"function\": {...}}")
	}
	names := make([]string, len(tools))
	for i, t := range tools {
		if t.Function.Name == "" {
			return nil, badRequest("tools", "tools[%d].function.name is required", i)
		}
		names[i] = t.Function.Name
	}
	return names, nil
}
