package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// httpWriteModel writes a model directory (config.pbtxt plus version 1 files)
// into repo; the broken models of these tests live only there.
func httpWriteModel(t *testing.T, repo, name, config string, files map[string]string) {
	t.Helper()
	dir := filepath.Join(repo, name, "1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, name, "config.pbtxt"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	for f, body := range files {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// writeFP32Model writes a model of httpFP32Config(name, extra) running
// modelPy into repo.
func writeFP32Model(t *testing.T, repo, name, extra, modelPy string) {
	t.Helper()
	httpWriteModel(t, repo, name, httpFP32Config(name, extra), map[string]string{"model.py": modelPy})
}

// httpFP32Config is a one-input, one-output FP32 Python model config.
func httpFP32Config(name, extra string) string {
	return fmt.Sprintf(`name: %q
backend: "python"
max_batch_size: 0
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]
%s
`, name, extra)
}

func (r *httpResponse) output(t *testing.T, name string) httpOutput {
	t.Helper()
	for _, o := range r.Outputs {
		if o.Name == name {
			return o
		}
	}
	t.Fatalf("response has no output %q: %+v", name, r.Outputs)
	return httpOutput{}
}

// httpBinaryBody builds a binary-extension request body: the JSON header
// followed by the blobs. It returns the body and the header length.
func httpBinaryBody(t *testing.T, header any, blobs ...[]byte) ([]byte, int) {
	t.Helper()
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	body := slices.Concat(append([][]byte{h}, blobs...)...)
	return body, len(h)
}

// httpInferJSON posts a JSON infer request and returns status and body.
func (s *server) httpInferJSON(model string, req any) (int, []byte) {
	s.t.Helper()
	return s.postJSON("/v2/models/"+model+"/infer", req)
}

// httpInferBinary posts a binary-extension infer request.
func (s *server) httpInferBinary(model string, header any, blobs ...[]byte) (int, http.Header, []byte) {
	s.t.Helper()
	body, n := httpBinaryBody(s.t, header, blobs...)
	return s.do("POST", "/v2/models/"+model+"/infer", body,
		"Inference-Header-Content-Length", strconv.Itoa(n), "Content-Type", "application/octet-stream")
}

// httpDecodeInfer parses a 200 infer response, JSON or binary, checking the
// binary framing: Content-Type, header length and blob sizes add up.
func httpDecodeInfer(t *testing.T, code int, h http.Header, body []byte) httpResponse {
	t.Helper()
	if code != http.StatusOK {
		t.Fatalf("infer: status %d: %s", code, body)
	}
	head, tail := body, []byte(nil)
	if v := h.Get("Inference-Header-Content-Length"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > len(body) {
			t.Fatalf("bad Inference-Header-Content-Length %q for a %d-byte body", v, len(body))
		}
		if ct := h.Get("Content-Type"); ct != "application/octet-stream" {
			t.Errorf("binary response Content-Type = %q, want application/octet-stream", ct)
		}
		head, tail = body[:n], body[n:]
	} else if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("JSON response Content-Type = %q", ct)
	}
	var r httpResponse
	d := json.NewDecoder(bytes.NewReader(head))
	d.UseNumber()
	if err := d.Decode(&r); err != nil {
		t.Fatalf("decode infer response: %v: %s", err, head)
	}
	r.Blobs = map[string][]byte{}
	for _, o := range r.Outputs {
		v, ok := o.Parameters["binary_data_size"]
		if !ok {
			continue
		}
		n, err := strconv.Atoi(fmt.Sprint(v))
		if err != nil || n > len(tail) {
			t.Fatalf("output %s: binary_data_size %v with %d bytes left", o.Name, v, len(tail))
		}
		if o.Data != nil {
			t.Errorf("binary output %s also has data: %s", o.Name, o.Data)
		}
		r.Blobs[o.Name], tail = tail[:n], tail[n:]
	}
	if len(tail) != 0 {
		t.Errorf("%d bytes after the last binary output", len(tail))
	}
	return r
}

// errorText decodes {"error": "..."}, failing on any other body.
func httpErrorText(t *testing.T, body []byte) string {
	t.Helper()
	var e struct {
		Error *string `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error == nil {
		t.Fatalf("not an error body: %q", body)
	}
	return *e.Error
}

// httpCanonJSON re-marshals a JSON value (numbers kept as written) so that two
// renderings of the same data compare equal.
func httpCanonJSON(t *testing.T, raw []byte) string {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// le encodes values little-endian, the binary extension's element order.
func httpLE(vs ...any) []byte {
	var b bytes.Buffer
	for _, v := range vs {
		_ = binary.Write(&b, binary.LittleEndian, v)
	}
	return b.Bytes()
}

// httpIOName maps a wire datatype to identity_all's tensor suffix.
func httpIOName(prefix, dtype string) string {
	if dtype == "BYTES" {
		return prefix + "_STRING"
	}
	return prefix + "_" + dtype
}

func httpAddSubJSON(a, b []float32) map[string]any {
	return map[string]any{"inputs": []map[string]any{
		{"name": "INPUT0", "shape": []int{len(a)}, "datatype": "FP32", "data": a},
		{"name": "INPUT1", "shape": []int{len(b)}, "datatype": "FP32", "data": b},
	}}
}

func httpMustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
