package main

import (
	"encoding/binary"
	"strconv"
	"testing"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// TestStreamBatchOrder sends requests one after another on one gRPC stream,
// without waiting for answers, to batch_order (a dynamic batcher filling
// batches of 8 within 100 ms), which reports for each request the IDX of
// the request before it in the same execute. Every batch must hold its
// requests in the order they were sent.
func TestStreamBatchOrder(t *testing.T) {
	ipctest.RequirePython(t)
	s := startServer(t, copyRepo(t, "batch_order"))
	_, c := grpcClient(t, s)
	const n = 64
	for round := range 3 {
		st, err := c.ModelStreamInfer(callCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if err := st.Send(&pb.ModelInferRequest{ModelName: "batch_order", Id: strconv.Itoa(i),
				Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "IDX", Datatype: "INT32", Shape: []int64{1, 1}}},
				RawInputContents: [][]byte{ipctest.INT32(int32(i))}}); err != nil {
				t.Fatal(err)
			}
		}
		_ = st.CloseSend()
		got, merged := 0, false
		recvEach(t, st, func(m *pb.ModelStreamInferResponse) bool {
			if m.ErrorMessage != "" {
				t.Fatalf("round %d: %s", round, m.ErrorMessage)
			}
			r := m.InferResponse
			idx, err := strconv.Atoi(r.Id)
			if err != nil {
				t.Fatalf("response id %q", r.Id)
			}
			_, prev := outputByName(t, r, "PREV")
			_, count := outputByName(t, r, "COUNT")
			if p := int32(binary.LittleEndian.Uint32(prev)); p >= int32(idx) {
				t.Errorf("round %d: request %d ran after request %d in its batch", round, idx, p)
			}
			if binary.LittleEndian.Uint32(count) > 1 {
				merged = true
			}
			got++
			return true
		})
		if got != n {
			t.Fatalf("round %d: %d responses, want %d", round, got, n)
		}
		if !merged {
			t.Fatalf("round %d: no two requests shared an execute; the test checks nothing", round)
		}
	}
}
