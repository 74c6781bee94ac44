package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// TestOpenAIRestrictedAndTLS: the OpenAI port is an HTTP port like the
// others, so --http-restricted-api's groups and the HTTP listener's TLS
// (mutual here) hold there too: completions are "inference", the model
// list "metadata", /health/ready "health".
func TestOpenAIRestrictedAndTLS(t *testing.T) {
	ipctest.RequirePython(t)
	c := newTLSSetup(t)
	s := startServer(t, copyRepo(t, "tiny_lm"), "--openai-port", "0",
		"--http-tls-cert", c.path("server.crt"), "--http-tls-key", c.path("server.key"), "--http-tls-client-ca", c.path("client-ca.crt"),
		"--http-restricted-api=inference:infer-key=infer-value", "--http-restricted-api=metadata:meta-key=meta-value")
	base := "https://" + hostPort(s.OpenAI)
	pair := c.client.Pair(t)
	client := httpsClient(c.serverCA, &pair)

	do := func(method, path string, body any, hdr ...string) (int, map[string]any) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequest(method, base+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		var m map[string]any
		raw, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(raw, &m)
		return resp.StatusCode, m
	}
	completion := map[string]any{"model": "tiny_lm", "prompt": "the ", "max_tokens": 4}
	cases := []struct {
		name, method, path string
		body               any
		hdr                []string
		want               int
		refusal            string
	}{
		{"completion without the header", "POST", "/v1/completions", completion, nil, 403, "This API is restricted, expecting header 'infer-key'"},
		{"completion with a wrong value", "POST", "/v1/completions", completion, []string{"infer-key", "nope"}, 403, "This API is restricted, expecting header 'infer-key'"},
		{"completion with another group's header", "POST", "/v1/completions", completion, []string{"meta-key", "meta-value"}, 403, "This API is restricted, expecting header 'infer-key'"},
		{"completion with the header", "POST", "/v1/completions", completion, []string{"infer-key", "infer-value"}, 200, ""},
		{"model list without the header", "GET", "/v1/models", nil, nil, 403, "This API is restricted, expecting header 'meta-key'"},
		{"model without the header", "GET", "/v1/models/tiny_lm", nil, []string{"infer-key", "infer-value"}, 403, "This API is restricted, expecting header 'meta-key'"},
		{"model list with the header", "GET", "/v1/models", nil, []string{"meta-key", "meta-value"}, 200, ""},
		{"health is not restricted", "GET", "/health/ready", nil, nil, 200, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body := do(tc.method, tc.path, tc.body, tc.hdr...)
			if code != tc.want {
				t.Fatalf("status %d %v, want %d", code, body, tc.want)
			}
			if tc.refusal != "" && (atStr(body, "error", "message") != tc.refusal || atStr(body, "error", "type") != "permission_error") {
				t.Errorf("body %v, want OpenAI's error object with %q", body, tc.refusal)
			}
		})
	}
	if _, err := httpsGet(httpsClient(c.serverCA, nil), base+"/health/ready"); err == nil {
		t.Error("without a client certificate: the OpenAI port answered")
	}
	if code, err := httpsGet(http.DefaultClient, s.OpenAI+"/health/ready"); err == nil && code == 200 {
		t.Error("plain HTTP was answered on the OpenAI port")
	}
}
