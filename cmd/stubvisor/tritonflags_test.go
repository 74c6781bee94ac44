package main

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

// TestIgnoredFlagsDocumented fails when a flag is accepted and ignored
// without a row in docs/security.md saying why that is harmless, or when
// a row names a flag that is no longer ignored.
func TestIgnoredFlagsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)` \\| (.+) \\|$").FindAllStringSubmatch(string(b), -1) {
		rows[m[1]] = len(m[2]) > 10
	}
	for _, f := range ignoredTritonFlags {
		if !rows[f] {
			t.Errorf("--%s is ignored but docs/security.md has no row saying why that is harmless", f)
		}
	}
	for f := range rows {
		if !slices.Contains(ignoredTritonFlags, f) {
			t.Errorf("docs/security.md lists --%s as ignored, but it is not", f)
		}
	}
}

// TestNoSafeguardIgnored: the flags that protect a deployment are real
// flags, never in the ignored list.
func TestNoSafeguardIgnored(t *testing.T) {
	for _, f := range []string{"http-restricted-api", "grpc-restricted-protocol", "grpc-use-ssl", "grpc-use-ssl-mutual",
		"grpc-server-cert", "grpc-server-key", "grpc-root-cert", "grpc-keepalive-time", "grpc-keepalive-timeout",
		"grpc-keepalive-permit-without-calls", "grpc-http2-min-recv-ping-interval-without-data", "grpc-http2-max-ping-strikes",
		"allow-http", "allow-grpc", "allow-metrics", "http-address", "grpc-address", "metrics-address", "exit-on-error",
		"http-max-input-size", "grpc-max-message-size", "model-control-mode", "strict-model-config"} {
		if slices.Contains(ignoredTritonFlags, f) {
			t.Errorf("--%s is a safeguard but is accepted and ignored", f)
		}
	}
}
