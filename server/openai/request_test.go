package openai

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"

	"github.com/stubvisor/stubvisor/backendapi"
)

func TestSamplingCheck(t *testing.T) {
	for _, tc := range []struct {
		body  string
		param string // "" means valid
	}{
		{`{"model": "m"}`, ""},
		{`{"model": "m", "temperature": 0, "top_p": 1, "n": 128, "max_tokens": 1, "stop": ["a", "b", "c", "d"]}`, ""},
		{`{}`, "model"},
		{`{"model": "m", "temperature": 2.5}`, "temperature"},
		{`{"model": "m", "top_p": 1.5}`, "top_p"},
		{`{"model": "m", "n": 129}`, "n"},
		{`{"model": "m", "max_tokens": 0}`, "max_tokens"},
		{`{"model": "m", "presence_penalty": -3}`, "presence_penalty"},
		{`{"model": "m", "logit_bias": {"1": 5}}`, "logit_bias"},
		{`{"model": "m", "stop": ["a", "b", "c", "d", "e"]}`, "stop"},
		{`{"model": "m", "stop": [1]}`, "stop"},
		{`{"model": "m", "stream": false, "stream_options": {"include_usage": true}}`, "stream_options"},
	} {
		var s sampling
		if err := json.Unmarshal([]byte(tc.body), &s); err != nil {
			t.Fatal(err)
		}
		err := s.check()
		if tc.param == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.body, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: no error, want a 400 for %s", tc.body, tc.param)
			continue
		}
		if _, obj := newErrorObject(err); obj.Error.Param == nil || *obj.Error.Param != tc.param || statusOf(err) != 400 {
			t.Errorf("%s: %v, want a 400 for %s", tc.body, err, tc.param)
		}
	}
}

func TestParsePromptAndStop(t *testing.T) {
	for _, tc := range []struct {
		raw, want string
		ok        bool
	}{{`"hi"`, "hi", true}, {`["hi"]`, "hi", true}, {`""`, "", false}, {`["a", "b"]`, "", false}, {`5`, "", false}, {``, "", false}} {
		got, err := parsePrompt(json.RawMessage(tc.raw))
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("parsePrompt(%s) = %q, %v", tc.raw, got, err)
		}
	}
	for _, tc := range []struct {
		raw  string
		want []string
	}{{`null`, nil}, {`"x"`, []string{"x"}}, {`""`, nil}, {`["x", "", "y"]`, []string{"x", "y"}}} {
		got, err := parseStop(json.RawMessage(tc.raw))
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("parseStop(%s) = %q, %v", tc.raw, got, err)
		}
	}
}

func TestDetectLayout(t *testing.T) {
	bytesIn := func(names ...string) map[string]backendapi.TensorMetadata {
		m := map[string]backendapi.TensorMetadata{}
		for _, n := range names {
			m[n] = backendapi.TensorMetadata{Name: n, DataType: backendapi.TypeBytes}
		}
		return m
	}
	text := map[string]bool{"text_output": true}
	for _, tc := range []struct {
		inputs  map[string]backendapi.TensorMetadata
		outputs map[string]bool
		want    layout
	}{
		{bytesIn("text_input", "sampling_parameters"), text, layoutVLLM},
		{bytesIn("text_input"), text, layoutTRTLLM},
		{bytesIn("embedding_request"), text, layoutEmbed},
		{bytesIn("text_input"), map[string]bool{"OUT": true}, layoutNone},
		{map[string]backendapi.TensorMetadata{"text_input": {DataType: backendapi.TypeFP32}}, text, layoutNone},
		{bytesIn("INPUT0"), text, layoutNone},
	} {
		if got := detectLayout(tc.inputs, tc.outputs); got != tc.want {
			t.Errorf("detectLayout(%v, %v) = %v, want %v", tc.inputs, tc.outputs, got, tc.want)
		}
	}
}

// buildGenRequest sends only the inputs a model declares, in its types and
// shapes; in the TRT-LLM layout the rest become request parameters.
func TestBuildGenRequest(t *testing.T) {
	temp, seed := 0.5, int64(7)
	g := &genSpec{prompt: "hi", stream: true, maxTokens: 9, temperature: &temp, seed: &seed, stops: []string{"a", "bc"}}
	trt := &modelInfo{name: "m", layout: layoutTRTLLM, inputs: map[string]backendapi.TensorMetadata{
		"text_input": {DataType: backendapi.TypeBytes, Shape: []int64{-1, 1}},
		"max_tokens": {DataType: backendapi.TypeInt32, Shape: []int64{-1, 1}},
		"stop_words": {DataType: backendapi.TypeBytes, Shape: []int64{-1, -1}},
		"stream":     {DataType: backendapi.TypeBool, Shape: []int64{1}},
	}}
	req, err := buildGenRequest(trt, g)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		shape []int64
		data  []byte
	}{
		"text_input": {[]int64{1, 1}, []byte{2, 0, 0, 0, 'h', 'i'}},
		"stream":     {[]int64{1}, []byte{1}},
		"max_tokens": {[]int64{1, 1}, []byte{9, 0, 0, 0}},
		"stop_words": {[]int64{1, 2}, []byte{1, 0, 0, 0, 'a', 2, 0, 0, 0, 'b', 'c'}},
	}
	if len(req.Inputs) != len(want) {
		t.Fatalf("inputs %+v", req.Inputs)
	}
	for _, in := range req.Inputs {
		w := want[in.Name]
		if !slices.Equal(in.Shape, w.shape) || !bytes.Equal(in.Data, w.data) {
			t.Errorf("input %s: shape %v data %v, want %v %v", in.Name, in.Shape, in.Data, w.shape, w.data)
		}
	}
	if req.Parameters["temperature"] != 0.5 || req.Parameters["seed"] != int64(7) {
		t.Errorf("parameters %v", req.Parameters)
	}

	vllm := &modelInfo{name: "m", layout: layoutVLLM, inputs: map[string]backendapi.TensorMetadata{
		"text_input":          {DataType: backendapi.TypeBytes, Shape: []int64{1}},
		"sampling_parameters": {DataType: backendapi.TypeBytes, Shape: []int64{1}},
	}}
	req, err = buildGenRequest(vllm, g)
	if err != nil {
		t.Fatal(err)
	}
	sp := string(req.Inputs[1].Data[4:])
	if req.Inputs[1].Name != "sampling_parameters" || sp != `{"max_tokens":9,"temperature":0.5,"seed":7,"stop":["a","bc"]}` || req.Parameters != nil {
		t.Errorf("vLLM request: %s %q %v", req.Inputs[1].Name, sp, req.Parameters)
	}
}
