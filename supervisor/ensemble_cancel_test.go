package supervisor

import (
	"context"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
)

// TestEnsembleCancelMidFlight cancels diamond requests at staggered
// moments, so some are cancelled while a queued step is being prepared
// (its inputs copied out of a producer's block). Every request either
// answers or fails with Cancelled, and once all are done no stub holds a
// block: no step read a released block and nothing leaked.
func TestEnsembleCancelMidFlight(t *testing.T) {
	models := []string{"ens_diamond", "ens_scale", "identity_fp32", "ens_offset", "ens_join"}
	s := newSupervisor(t, models...)
	data := make([]byte, 4*4096) // over the inline limit: steps read arena blocks
	for k := 0; k < 4096; k++ {
		binary.LittleEndian.PutUint32(data[4*k:], math.Float32bits(3))
	}
	cancelStaggered(t, func(ctx context.Context) error {
		resp, err := s.Infer(ctx, &backendapi.InferRequest{ModelName: "ens_diamond", Inputs: []backendapi.InputTensor{
			{Name: "INPUT0", DataType: backendapi.TypeFP32, Shape: []int64{4096}, Data: data}}})
		if err == nil {
			resp.Release()
		}
		return err
	})
	// A cancelled step's stub still answers later; its blocks are freed
	// when that answer is read, so wait (bounded) for every arena to empty.
	deadline := time.Now().Add(20 * time.Second)
	for _, m := range models[1:] {
		for poolInUse(t, s, m) != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d bytes still in use after every request ended", m, poolInUse(t, s, m))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
