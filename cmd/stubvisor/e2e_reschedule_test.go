package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// iterativeConfig is iterative_count's configuration with the given
// transaction policy and scheduler.
func iterativeConfig(name string, decoupled bool, scheduler string) string {
	return fmt.Sprintf(`name: "%s"
backend: "python"
max_batch_size: 4
model_transaction_policy { decoupled: %v }
%s
input [{ name: "IN", data_type: TYPE_INT32, dims: [ 1 ] }]
output [
  { name: "LEFT", data_type: TYPE_INT32, dims: [ 1 ] },
  { name: "CORRID", data_type: TYPE_UINT64, dims: [ 1 ] }
]
instance_group [{ kind: KIND_CPU, count: 1 }]
`, name, decoupled, scheduler)
}

// countdown is the HTTP body of one iterative_count request.
func countdown(n int, params map[string]any) map[string]any {
	req := map[string]any{"inputs": []map[string]any{{"name": "IN", "datatype": "INT32", "shape": []int{1, 1}, "data": []int{n}}}}
	if params != nil {
		req["parameters"] = params
	}
	return req
}

// TestRequestRescheduling drives models that release their requests with
// RESCHEDULE: under sequence_batching { iterative_sequence: true } a
// request runs again, step by step, until the model lets it go; any other
// scheduler refuses with Triton's error.
func TestRequestRescheduling(t *testing.T) {
	ipctest.RequirePython(t)
	model, err := os.ReadFile(filepath.Join("..", "..", "testdata", "models", "iterative_count", "1", "model.py"))
	if err != nil {
		t.Fatal(err)
	}
	repo := copyRepo(t, "iterative_count")
	files := map[string]string{"model.py": string(model)}
	httpWriteModel(t, repo, "iterative_once", iterativeConfig("iterative_once", false, "sequence_batching { iterative_sequence: true }"), files)
	httpWriteModel(t, repo, "iterative_dynamic", iterativeConfig("iterative_dynamic", false, "dynamic_batching {}"), files)
	httpWriteModel(t, repo, "iterative_direct", iterativeConfig("iterative_direct", false, "sequence_batching { direct {} }"), files)
	s := startServer(t, repo)
	_, c := grpcClient(t, s)

	stats := func(model string) (inferences, executions uint64) {
		t.Helper()
		var st modelStats
		s.getJSON("/v2/models/"+model+"/stats", &st)
		return st.ModelStats[0].InferenceCount, st.ModelStats[0].ExecutionCount
	}
	type answer struct {
		Outputs []struct {
			Name string   `json:"name"`
			Data []uint64 `json:"data"`
		} `json:"outputs"`
	}
	// final posts one request to a non-decoupled model and returns its
	// LEFT and CORRID.
	final := func(model string, n int, params map[string]any) (left, corrid uint64) {
		t.Helper()
		r := postInfer(s.HTTP, model, countdown(n, params))
		if r.err != nil || r.code != http.StatusOK {
			t.Fatalf("%s: %d %s %v", model, r.code, r.body, r.err)
		}
		var a answer
		if err := json.Unmarshal(r.body, &a); err != nil {
			t.Fatal(err)
		}
		for _, o := range a.Outputs {
			if o.Name == "LEFT" {
				left = o.Data[0]
			} else {
				corrid = o.Data[0]
			}
		}
		return left, corrid
	}

	t.Run("decoupled steps stream", func(t *testing.T) {
		st, err := c.ModelStreamInfer(callCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		// b takes the first slot and a the second; a outlives b, so its
		// last step runs with a not-ready filler in b's empty slot.
		for _, r := range []struct {
			id string
			n  int32
		}{{"b", 2}, {"a", 3}} {
			req := &pb.ModelInferRequest{ModelName: "iterative_count", Id: r.id,
				Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "INT32", Shape: []int64{1, 1}}},
				RawInputContents: [][]byte{ipctest.INT32(r.n)}}
			if err := st.Send(req); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		lefts := map[string][]int32{}
		corrids := map[string][]uint64{}
		for _, m := range recvStream(t, st) {
			r := m.InferResponse
			_, left := outputByName(t, r, "LEFT")
			_, corrid := outputByName(t, r, "CORRID")
			lefts[r.Id] = append(lefts[r.Id], int32(binary.LittleEndian.Uint32(left)))
			corrids[r.Id] = append(corrids[r.Id], binary.LittleEndian.Uint64(corrid))
		}
		if !slices.Equal(lefts["a"], []int32{2, 1, 0}) || !slices.Equal(lefts["b"], []int32{1, 0}) {
			t.Fatalf("steps %v, want a counting 2,1,0 and b 1,0", lefts)
		}
		// Each request became a sequence of its own, under an id the
		// server picked and kept across its steps.
		a, b := slices.Compact(corrids["a"]), slices.Compact(corrids["b"])
		if len(a) != 1 || len(b) != 1 || a[0] == 0 || b[0] == 0 || a[0] == b[0] {
			t.Fatalf("correlation ids a %v b %v, want one non-zero id each, different", corrids["a"], corrids["b"])
		}
		if inf, exe := stats("iterative_count"); inf != 2 || exe < 3 {
			t.Fatalf("inference_count %d execution_count %d, want 2 inferences over at least 3 executions", inf, exe)
		}
	})

	t.Run("non-decoupled answers at the last step", func(t *testing.T) {
		left, corrid := final("iterative_once", 3, nil)
		if left != 0 || corrid == 0 {
			t.Fatalf("LEFT %d CORRID %d, want 0 and a picked id", left, corrid)
		}
		if inf, exe := stats("iterative_once"); inf != 1 || exe != 3 {
			t.Fatalf("inference_count %d execution_count %d, want 1 inference over 3 executions", inf, exe)
		}
	})

	t.Run("client sequence id ends with its request", func(t *testing.T) {
		params := map[string]any{"sequence_id": 77, "sequence_start": true}
		if left, corrid := final("iterative_once", 2, params); left != 0 || corrid != 77 {
			t.Fatalf("LEFT %d CORRID %d, want 0 and 77", left, corrid)
		}
		r := postInfer(s.HTTP, "iterative_once", countdown(1, map[string]any{"sequence_id": 77}))
		if r.code != http.StatusBadRequest || !strings.Contains(errorText(r.body), "must specify the START flag on the first request of the sequence") {
			t.Fatalf("request to the finished sequence: %d %s", r.code, r.body)
		}
	})

	t.Run("other schedulers refuse", func(t *testing.T) {
		for _, model := range []string{"iterative_dynamic", "iterative_direct"} {
			r := postInfer(s.HTTP, model, countdown(2, map[string]any{"sequence_id": 5, "sequence_start": true}))
			want := "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured to handle such a flag."
			if r.err != nil || r.code != http.StatusBadRequest || errorText(r.body) != want {
				t.Errorf("%s: %d %s %v, want 400 %q", model, r.code, r.body, r.err, want)
			}
		}
	})
}
