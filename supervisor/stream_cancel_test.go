package supervisor

import (
	"context"
	"sync"
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
	var wg sync.WaitGroup
	errs := make(chan error, 8*40)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				ctx, cancel := context.WithCancel(context.Background())
				go func() {
					// Staggered over the run of a request: 0 to ~2 ms.
					for range (g*40 + i) % 64 * 1000 {
						if ctx.Err() != nil {
							return
						}
					}
					cancel()
				}()
				finals := 0
				err := s.InferStream(ctx, &backendapi.InferRequest{ModelName: "identity_fp32", Inputs: []backendapi.InputTensor{
					{Name: "INPUT0", DataType: backendapi.TypeFP32, Shape: []int64{4}, Data: ipctest.FP32(1, 2, 3, 4)}}},
					func(resp *backendapi.InferResponse, err error, final bool) {
						if err != nil && backendapi.CodeOf(err) != backendapi.Cancelled {
							errs <- err
						}
						if final {
							finals++
						}
					})
				cancel()
				if err != nil && backendapi.CodeOf(err) != backendapi.Cancelled {
					errs <- err
				}
				if err == nil && finals != 1 {
					t.Errorf("request %d/%d: %d final calls, want 1", g, i, finals)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
