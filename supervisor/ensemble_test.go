package supervisor

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
)

// TestEnsembleConcurrent runs the diamond from many goroutines at once
// (parallel steps, shared stubs, refcounted hand-offs) and checks every
// answer; under -race it also checks the run's bookkeeping.
func TestEnsembleConcurrent(t *testing.T) {
	s := newSupervisor(t, "ens_diamond", "ens_scale", "identity_fp32", "ens_offset", "ens_join")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				x := float32(g*100 + i)
				data := make([]byte, 4*256)
				for k := 0; k < 256; k++ {
					binary.LittleEndian.PutUint32(data[4*k:], math.Float32bits(x))
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				resp, err := s.Infer(ctx, &backendapi.InferRequest{ModelName: "ens_diamond", Inputs: []backendapi.InputTensor{
					{Name: "INPUT0", DataType: backendapi.TypeFP32, Shape: []int64{256}, Data: data}}})
				cancel()
				if err != nil {
					errs <- err
					return
				}
				for _, o := range resp.Outputs {
					want := 4*x + 1
					if o.Name == "SCALED" {
						want = 2 * x
					}
					if got := math.Float32frombits(binary.LittleEndian.Uint32(o.Data[1020:])); got != want || len(o.Data) != 1024 {
						errs <- fmt.Errorf("%s for %v: %v (%d bytes), want %v", o.Name, x, got, len(o.Data), want)
					}
				}
				resp.Release()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
