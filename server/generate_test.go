package server

import (
	"slices"
	"testing"

	"github.com/stubvisor/stubvisor/backendapi"
)

// TestGenerateHandler drives /generate and /generate_stream of the handler
// over the test backend, whose models answer once.
func TestGenerateHandler(t *testing.T) {
	ts := newTestServer(t, Options{})
	cases := []struct {
		name, path, body string
		header           map[string]string
		status           int
		ctype            string
		want             string
	}{
		{"add_sub", "/v2/models/add_sub/generate", `{"INPUT0":[1,2,3,4],"INPUT1":[1,1,1,1],"id":"42","temperature":0.5}`, nil, 200, "application/json",
			`{"OUTPUT0":[2,3,4,5],"OUTPUT1":[0,1,2,3],"id":"42","model_name":"add_sub","model_version":"1","temperature":0.5}`},
		{"identity scalar", "/v2/models/identity/generate", `{"INPUT0":7}`, nil, 200, "application/json",
			`{"OUTPUT0":7,"model_name":"identity","model_version":"1"}`},
		{"nested parameters map inputs", "/v2/models/identity/generate", `{"parameters":{"INPUT0":[1,2]}}`, nil, 200, "application/json",
			`{"OUTPUT0":[1,2],"model_name":"identity","model_version":"1"}`},
		{"stream", "/v2/models/identity/versions/1/generate_stream", `{"INPUT0":[1.5]}`, nil, 200, "text/event-stream; charset=utf-8",
			"data: {\"OUTPUT0\":1.5,\"model_name\":\"identity\",\"model_version\":\"1\"}\n\n"},
		{"bytes", "/v2/models/bytes_raw/generate", `{"INPUT0":"hello"}`, nil, 200, "application/json",
			`{"OUTPUT0":"hello","model_name":"bytes_raw","model_version":"1"}`},
		{"bad string", "/v2/models/bytes_raw/generate", `{"INPUT0":1}`, nil, 500, "application/json",
			errorBody("Unable to parse JSON bytes array: attempt to access JSON non-string as string")},
		{"stream error is JSON", "/v2/models/bytes_raw/generate_stream", `{"INPUT0":true}`, nil, 500, "application/json",
			errorBody("Unable to parse JSON bytes array: attempt to access JSON non-string as string")},
		{"duplicate input", "/v2/models/identity/generate", `{"INPUT0":1,"INPUT0":2}`, nil, 400, "application/json",
			errorBody("input 'INPUT0' already exists in request")},
		{"parameters not object", "/v2/models/identity/generate", `{"INPUT0":1,"parameters":1}`, nil, 400, "application/json",
			errorBody("Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object")},
		{"nested parameter", "/v2/models/identity/generate", `{"INPUT0":1,"parameters":{"nested":{"twice":1}}}`, nil, 400, "application/json",
			errorBody("Converting keyword: 'parameters': parameter 'nested' has invalid type. It should be either 'int', 'bool', or 'string'.")},
		{"complex parameter", "/v2/models/identity/generate", `{"INPUT0":1,"PARAMS":{"a":1}}`, nil, 400, "application/json",
			errorBody("parameter 'PARAMS' has invalid type. It should be either 'int', 'bool', or 'string'.")},
		{"shape does not fit", "/v2/models/add_sub/generate", `{"INPUT0":[1,2,3],"INPUT1":[1,1,1,1]}`, nil, 400, "application/json",
			errorBody("The schema can not convert input 'INPUT0' to tensor with proper shape")},
		{"syntax", "/v2/models/identity/generate", `{"INPUT0":`, nil, 400, "application/json",
			errorBody("failed to parse the request JSON buffer: Invalid value. at 10")},
		{"unknown model", "/v2/models/nope/generate", `{}`, nil, 400, "application/json",
			errorBody("Request for unknown model: 'nope' is not found")},
		{"compressed", "/v2/models/identity/generate", `{}`, map[string]string{"Content-Encoding": "gzip"}, 400, "application/json",
			errorBody("Unsupported content-encoding, only 'identity' is supported.")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := ts.do(t, "POST", c.path, []byte(c.body), c.header)
			if rep.status != c.status || string(rep.body) != c.want {
				t.Fatalf("status %d body %s\nwant %d %s", rep.status, rep.body, c.status, c.want)
			}
			if ct := rep.header.Get("Content-Type"); ct != c.ctype {
				t.Errorf("Content-Type %q, want %q", ct, c.ctype)
			}
		})
	}
	t.Run("parameters reach the model", func(t *testing.T) {
		ts.b.mu.Lock()
		ts.b.requests = nil
		ts.b.mu.Unlock()
		ts.do(t, "POST", "/v2/models/identity/generate", []byte(`{"INPUT0":1,"id":"x","parameters":{"max_tokens":5,"stream":false},"temperature":0.5,"stop":"."}`), nil)
		ts.b.mu.Lock()
		defer ts.b.mu.Unlock()
		if len(ts.b.requests) != 1 {
			t.Fatalf("%d requests", len(ts.b.requests))
		}
		got := ts.b.requests[0]
		want := map[string]any{"id": "x", "max_tokens": int64(5), "stream": false, "temperature": 0.5, "stop": "."}
		if got.ID != "x" || len(got.Parameters) != len(want) {
			t.Fatalf("request %+v", got)
		}
		for k, v := range want {
			if got.Parameters[k] != v {
				t.Errorf("parameter %s = %#v, want %#v", k, got.Parameters[k], v)
			}
		}
	})
}

func TestGenerateShape(t *testing.T) {
	cases := []struct {
		name  string
		dims  []int64
		count int64
		want  []int64
	}{
		{"fixed", []int64{1, 1}, 1, []int64{1, 1}},
		{"inner variable", []int64{1, -1}, 3, []int64{1, 3}},
		{"batch and variable", []int64{-1, -1}, 4, []int64{1, 4}},
		{"fixed shares first", []int64{-1, 2}, 6, []int64{3, 2}},
		{"empty", []int64{-1}, 0, []int64{0}},
		{"does not divide", []int64{4}, 3, nil},
		{"too many for fixed", []int64{1}, 2, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := genShape(c.dims, c.count)
			if ok != (c.want != nil) || ok && !slices.Equal(got, c.want) {
				t.Fatalf("genShape(%v, %d) = %v, %v; want %v", c.dims, c.count, got, ok, c.want)
			}
		})
	}
}

func TestGenerateResponseJSON(t *testing.T) {
	resp := &backendapi.InferResponse{ModelName: "m", ModelVersion: 2,
		Parameters: map[string]any{"model_name": "shadowed", "finish": "length", "n": int64(3)},
		Outputs: []backendapi.OutputTensor{
			{Name: "text_output", DataType: backendapi.TypeBytes, Shape: []int64{1}, Data: appendBytesElement(nil, []byte("hi \"x\""))},
			{Name: "empty", DataType: backendapi.TypeInt32, Shape: []int64{0}},
			{Name: "ids", DataType: backendapi.TypeInt32, Shape: []int64{2}, Data: []byte{1, 0, 0, 0, 2, 0, 0, 0}},
		}}
	got, err := appendGenerateResponse(nil, resp, "m", "7")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"empty":[],"finish":"length","id":"7","ids":[1,2],"model_name":"m","model_version":"2","n":3,"text_output":"hi \"x\""}`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	resp.Outputs = []backendapi.OutputTensor{{Name: "h", DataType: backendapi.TypeFP16, Shape: []int64{1}, Data: []byte{0, 0}}}
	if _, err := appendGenerateResponse(nil, resp, "m", ""); err == nil {
		t.Fatal("FP16 output: no error")
	}
}
