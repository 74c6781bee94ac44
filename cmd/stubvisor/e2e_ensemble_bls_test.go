package main

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
)

// A model's BLS request to an ensemble runs the ensemble's steps, as any
// caller's request does: the ensemble is a scheduler like the others.
// ens_nested has ens_pipeline as a step: loading it loads the ensemble it
// nests (explicit mode), and it is reached directly and through BLS.
func TestBLSCallsAnEnsemble(t *testing.T) {
	s := startEnsembleServer(t, "--load-model", "ens_nested", "--load-model", "bls_forward")
	for _, tc := range []struct {
		name  string
		model string
		in    []float32
		want  []float32
	}{
		// ens_pipeline: OUTPUT0 = 2 * INPUT0 + 1, through three steps.
		{"one element", "ens_pipeline", []float32{4}, []float32{9}},
		{"several", "ens_pipeline", []float32{1, 2, 3}, []float32{3, 5, 7}},
		// ens_nested: ens_pipeline, then x 2.
		{"nested ensemble", "ens_nested", []float32{1, 2, 3}, []float32{6, 10, 14}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := s.postJSON("/v2/models/bls_forward/infer", blsForwardBody(tc.model, nil, tc.in, nil))
			var a blsAnswer
			if code != http.StatusOK || json.Unmarshal(body, &a) != nil {
				t.Fatalf("%d %s", code, body)
			}
			if got := a.output("OUTPUT0"); !slices.Equal(got, tc.want) {
				t.Fatalf("OUTPUT0 = %v, want %v (%s)", got, tc.want, body)
			}
		})
	}
	t.Run("nested ensemble called directly", func(t *testing.T) {
		if out := ensOutputs(t, s, "ens_nested", ensFP32(nil, nil, 1, 2)); out["OUTPUT0"] != "[6,10]" {
			t.Fatalf("OUTPUT0 = %s, want [6,10]", out["OUTPUT0"])
		}
	})
}
