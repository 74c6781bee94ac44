package openai

import (
	"strings"
	"testing"
)

// The tool-call parsers read the outputs that Triton's frontend tests
// feed its llama3 and mistral parsers, and leave other text alone.
func TestToolParsers(t *testing.T) {
	type call struct{ name, args string }
	for _, tc := range []struct {
		parser, text string
		want         []call // nil: not a tool call
	}{
		{"llama3", `{"name": "get_weather", "parameters": {"city": "Dallas", "state": "TX"}}`, []call{{"get_weather", `{"city":"Dallas","state":"TX"}`}}},
		{"llama3", `<|python_tag|>{"name": "a", "arguments": {"x": 1}}; {"name": "b", "arguments": {}}`, []call{{"a", `{"x":1}`}, {"b", `{}`}}},
		{"llama3", `The weather is sunny.`, nil},
		{"llama3", `{"name": "a", "arguments": {"x": 1}} and more`, nil},
		{"llama3", `{"not a": "call"}`, nil},
		{"mistral", `[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}]`, []call{{"get_weather", `{"city":"Paris"}`}}},
		{"mistral", `[{"name": "a", "arguments": {"x": [1, 2]}}, {"name": "b", "arguments": {"y": "z"}}]`, []call{{"a", `{"x":[1,2]}`}, {"b", `{"y":"z"}`}}},
		{"mistral", `[TOOL_CALLS] [{"name": "a", "arguments": {"x": 1}}] trailing`, []call{{"a", `{"x":1}`}}},
		{"mistral", `[1, 2, 3]`, nil},
		{"mistral", `Paris is in France.`, nil},
	} {
		t.Run(tc.parser+" "+tc.text, func(t *testing.T) {
			p, err := newToolParser(tc.parser)
			if err != nil {
				t.Fatal(err)
			}
			calls, ok := p.parse(tc.text)
			if ok != (tc.want != nil) || len(calls) != len(tc.want) {
				t.Fatalf("parse: %v %+v, want %v", ok, calls, tc.want)
			}
			for i, c := range calls {
				if c.Function.Name != tc.want[i].name || c.Function.Arguments != tc.want[i].args || c.Type != "function" || c.ID == "" {
					t.Errorf("call %d: %+v, want %v", i, c, tc.want[i])
				}
			}
		})
	}
	if _, err := newToolParser("hermes"); err == nil || !strings.Contains(err.Error(), "llama3 or mistral") {
		t.Errorf("unknown parser: %v", err)
	}
}

func TestToolParserMayStart(t *testing.T) {
	for _, tc := range []struct {
		parser, text string
		want         bool
	}{
		{"llama3", "{", true}, {"llama3", "<|pyt", true}, {"llama3", "Hello", false},
		{"mistral", "[TOOL", true}, {"mistral", "[{", true}, {"mistral", "Sure", false},
	} {
		p, _ := newToolParser(tc.parser)
		if got := p.mayStart(tc.text); got != tc.want {
			t.Errorf("%s mayStart(%q) = %v", tc.parser, tc.text, got)
		}
	}
}
