package supervisor

import (
	"context"
	"testing"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// TestInferStreamCancelMidFlight cancels streamed requests at staggered
// moments. Each ends once, with its answer or Cancelled, and leaves the
// version's active count: the supervisor's stop at cleanup would otherwise
// wait its whole deadline and report the waiting goroutines as leaked.
func TestInferStreamCancelMidFlight(t *testing.T) {
	s := newSupervisor(t, "identity_fp32")
	cancelStaggered(t, func(ctx context.Context) error {
		finals := 0
		var sent error
		err := s.InferStream(ctx, &backendapi.InferRequest{ModelName: "identity_fp32", Inputs: []backendapi.InputTensor{
			{Name: "INPUT0", DataType: backendapi.TypeFP32, Shape: []int64{4}, Data: ipctest.FP32(1, 2, 3, 4)}}},
			func(_ *backendapi.InferResponse, err error, final bool) {
				if err != nil {
					sent = err
				}
				if final {
					finals++
				}
			})
		if err != nil {
			return err
		}
		if finals != 1 {
			t.Errorf("%d final calls, want 1", finals)
		}
		return sent
	})
}
