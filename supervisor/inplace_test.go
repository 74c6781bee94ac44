package supervisor

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
)

// poolInUse is the bytes in use in both arenas of model's only stub.
func poolInUse(t *testing.T, s *Supervisor, model string) uint64 {
	t.Helper()
	st, err := s.Stubs(context.Background(), model)
	if err != nil || len(st) != 1 || len(st[0].Stubs) != 1 {
		t.Fatalf("stubs of %s: %v %+v", model, err, st)
	}
	return st[0].Stubs[0].PoolInUse
}

// A model that returns an input unchanged (identity_fp32) answers with the
// input's own block: no copy in the stub, and the block lives until the
// response is released, while later requests take other blocks.
func TestOutputIsTheInputBlockUntilReleased(t *testing.T) {
	s := newSupervisor(t, "identity_fp32")
	const n = 16 << 10 // 64 KiB: far over the inline limit
	req := func(seed byte) *backendapi.InferRequest {
		data := make([]byte, 4*n)
		for i := range data {
			data[i] = seed + byte(i%251)
		}
		return &backendapi.InferRequest{ModelName: "identity_fp32", Inputs: []backendapi.InputTensor{
			{Name: "INPUT0", DataType: backendapi.TypeFP32, Shape: []int64{n}, Data: data}}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first := req(1)
	held, err := s.Infer(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 { // would reuse the first input's block if it were freed
		r := req(byte(10 + i))
		resp, err := s.Infer(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(resp.Outputs[0].Data, r.Inputs[0].Data) {
			t.Fatalf("request %d: output differs from its input", i)
		}
		resp.Release()
	}
	if !bytes.Equal(held.Outputs[0].Data, first.Inputs[0].Data) {
		t.Fatal("a held response's output changed: its input block was reused")
	}
	if got := poolInUse(t, s, "identity_fp32"); got < 4*n {
		t.Fatalf("pool in use %d while a %d-byte response is held", got, 4*n)
	}
	held.Release()
	// The outputs were the inputs' blocks, which Release frees at once.
	if got := poolInUse(t, s, "identity_fp32"); got != 0 {
		t.Fatalf("pool in use %d after every response was released", got)
	}
}
