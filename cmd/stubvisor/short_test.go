package main

import "testing"

// slow marks an end-to-end test that the fast lane (make check, go test
// -short) leaves to the full gate (make test): the slowest cases. The
// other end-to-end tests and every package's own tests still run there.
func slow(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("slow end-to-end case: skipped in -short mode (make check); make test runs it")
	}
}
