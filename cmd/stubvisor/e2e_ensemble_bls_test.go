package main

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
)

// A model's BLS request to an ensemble runs the ensemble's steps, as any
// caller's request does: the ensemble is a scheduler like the others.
func TestBLSCallsAnEnsemble(t *testing.T) {
	s := startEnsembleServer(t, "--load-model", "ens_pipeline", "--load-model", "bls_forward")
	for _, tc := range []struct {
		name string
		in   []float32
		want []float32
	}{
		{"one element", []float32{4}, []float32{9}},
		{"several", []float32{1, 2, 3}, []float32{3, 5, 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// ens_pipeline: OUTPUT0 = 2 * INPUT0 + 1, through three steps.
			code, body := s.postJSON("/v2/models/bls_forward/infer", blsForwardBody("ens_pipeline", nil, tc.in, nil))
			var a blsAnswer
			if code != http.StatusOK || json.Unmarshal(body, &a) != nil {
				t.Fatalf("%d %s", code, body)
			}
			if got := a.output("OUTPUT0"); !slices.Equal(got, tc.want) {
				t.Fatalf("OUTPUT0 = %v, want %v (%s)", got, tc.want, body)
			}
		})
	}
}
