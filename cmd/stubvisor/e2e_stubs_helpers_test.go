package main

import (
	"testing"
	"time"
)

// stubStatus is the part of one stub in GET /v2/stubs (and
// /v2/models/{m}/stubs) that the tests read.
type stubStatus struct {
	Instance      string `json:"instance"`
	Kind          string `json:"kind"`
	PID           int    `json:"pid"`
	State         string `json:"state"`
	Restarts      int    `json:"restarts"`
	LastCause     string `json:"last_exit_cause"`
	InFlight      int    `json:"in_flight"`
	PoolInUse     uint64 `json:"pool_bytes_in_use"`
	PoolHighWater uint64 `json:"pool_bytes_high_water"`
}

// modelStubs is one model version in GET /v2/stubs: its state and stubs.
type modelStubs struct {
	Model   string       `json:"model"`
	Version string       `json:"version"`
	State   string       `json:"state"`
	Reason  string       `json:"reason"`
	Stubs   []stubStatus `json:"stubs"`
}

// stubsOf returns GET /v2/models/{model}/stubs, one entry a version.
func stubsOf(t *testing.T, s *server, model string) []modelStubs {
	t.Helper()
	var ms []modelStubs
	s.getJSON("/v2/models/"+model+"/stubs", &ms)
	return ms
}

// allStubs returns the stubs of every version of model.
func allStubs(t *testing.T, s *server, model string) []stubStatus {
	t.Helper()
	var out []stubStatus
	for _, m := range stubsOf(t, s, model) {
		out = append(out, m.Stubs...)
	}
	return out
}

// oneStub returns model's stub, failing unless the model has one version
// with one stub.
func oneStub(t *testing.T, s *server, model string) stubStatus {
	t.Helper()
	ms := stubsOf(t, s, model)
	if len(ms) != 1 || len(ms[0].Stubs) != 1 {
		t.Fatalf("stubs of %s: %+v, want one", model, ms)
	}
	return ms[0].Stubs[0]
}

// waitInFlight waits until model's stubs have n requests in flight
// between them, as /v2/models/{model}/stubs reports.
func waitInFlight(t *testing.T, s *server, model string, n int, timeout time.Duration, what string) {
	t.Helper()
	waitFor(t, timeout, what, func() bool {
		got := 0
		for _, st := range allStubs(t, s, model) {
			got += st.InFlight
		}
		return got == n
	})
}
