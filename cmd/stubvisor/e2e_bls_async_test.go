package main

// End-to-end test of decoupled BLS awaited from an `async def execute`:
// the awaits of requests that reach one instance one after another must
// overlap on the stub's event loop (python_backend's QA
// test_concurrent_execute_multi_request_bls). The requests are sent one
// by one, each once the BLS call of the one before reached the callee.

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

func TestBLSAsyncDecoupledOverlap(t *testing.T) {
	ipctest.RequirePython(t)
	s := startServer(t, copyRepo(t, "bls_await_decoupled", "meet_decoupled"))
	_, c := grpcClient(t, s)
	for _, parties := range []int32{1, 4} {
		t.Run(fmt.Sprintf("%d requests", parties), func(t *testing.T) {
			st, err := c.ModelStreamInfer(callCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			for i := range parties {
				err := st.Send(&pb.ModelInferRequest{ModelName: "bls_await_decoupled", Id: fmt.Sprint(i),
					Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "PARTIES", Datatype: "INT32", Shape: []int64{1}}},
					RawInputContents: [][]byte{ipctest.INT32(parties)}})
				if err != nil {
					t.Fatal(err)
				}
				// The next request goes once this one's BLS call is in
				// the callee: the caller's event loop, now waiting for
				// the callee's answer, must still take it. (The last
				// call completes the meeting: all leave at once.)
				if i == parties-1 {
					break
				}
				waitInFlight(t, s, "meet_decoupled", int(i+1), 8*time.Second,
					fmt.Sprintf("BLS call %d of %d in meet_decoupled", i+1, parties))
			}
			// Each request gets one MET: the most callee executions its
			// own saw running together. Calls that did not overlap see
			// fewer than all of them (after the callee gives up, 10 s).
			met := map[string]int32{}
			recvEach(t, st, func(m *pb.ModelStreamInferResponse) bool {
				if m.ErrorMessage != "" {
					t.Fatalf("stream error: %s", m.ErrorMessage)
				}
				_, raw := outputByName(t, m.InferResponse, "MET")
				met[m.InferResponse.Id] = int32(binary.LittleEndian.Uint32(raw))
				return len(met) < int(parties)
			})
			_ = st.CloseSend()
			for i := range parties {
				if got := met[fmt.Sprint(i)]; got != parties {
					t.Errorf("request %d: %d BLS calls overlapped, want %d (all: %v)", i, got, parties, met)
				}
			}
		})
	}
}
