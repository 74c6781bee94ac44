package main

// End-to-end tests of BLS (pb_utils.InferenceRequest.exec/async_exec from
// inside a model): testdata/models/bls_* calling other models over the real
// server, driven over HTTP and gRPC.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// blsForwardBody is an HTTP body for bls_forward: call model with the
// given inputs (INPUT0, INPUT1; nil leaves one out).
func blsForwardBody(model string, params map[string]any, in0, in1 []float32) map[string]any {
	inputs := []map[string]any{{"name": "MODEL_NAME", "datatype": "BYTES", "shape": []int{1}, "data": []string{model}}}
	for i, in := range [][]float32{in0, in1} {
		if in != nil {
			inputs = append(inputs, map[string]any{"name": []string{"INPUT0", "INPUT1"}[i], "datatype": "FP32", "shape": []int{len(in)}, "data": in})
		}
	}
	body := map[string]any{"inputs": inputs}
	if params != nil {
		body["parameters"] = params
	}
	return body
}

// blsAnswer is the part of an inference response the BLS tests read.
type blsAnswer struct {
	Parameters map[string]any `json:"parameters"`
	Outputs    []struct {
		Name  string    `json:"name"`
		Shape []int64   `json:"shape"`
		Data  []float32 `json:"data"`
	} `json:"outputs"`
}

func (a blsAnswer) output(name string) []float32 {
	for _, o := range a.Outputs {
		if o.Name == name {
			return o.Data
		}
	}
	return nil
}

// streamInt32 reads a decoupled stream to its end and returns every
// response's INT32/BOOL outputs by name, in order.
func streamInt32(t *testing.T, st pb.GRPCInferenceService_ModelStreamInferClient) []map[string]int32 {
	t.Helper()
	var got []map[string]int32
	recvEach(t, st, func(m *pb.ModelStreamInferResponse) bool {
		if m.ErrorMessage != "" {
			t.Fatalf("stream error: %s", m.ErrorMessage)
		}
		r := m.InferResponse
		outs := map[string]int32{}
		for i, o := range r.GetOutputs() {
			raw := r.RawOutputContents[i]
			if o.Datatype == "BOOL" {
				outs[o.Name] = int32(raw[0])
			} else {
				outs[o.Name] = int32(binary.LittleEndian.Uint32(raw))
			}
		}
		got = append(got, outs)
		final := r.GetParameters()["triton_final_response"]
		return final == nil || !final.GetBoolParam()
	})
	return got
}

// blsStreamRequest is one request for bls_stream.
func blsStreamRequest(id string, cancelAfter int32, in ...int32) *pb.ModelInferRequest {
	return &pb.ModelInferRequest{ModelName: "bls_stream", Id: id,
		Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "IN", Datatype: "INT32", Shape: []int64{int64(len(in))}},
			{Name: "CANCEL_AFTER", Datatype: "INT32", Shape: []int64{1}},
		},
		RawInputContents: [][]byte{ipctest.INT32(in...), ipctest.INT32(cancelAfter)}}
}

func TestBLS(t *testing.T) {
	slow(t)
	ipctest.RequirePython(t)
	repo := copyRepo(t, "bls_forward", "bls_forward_async", "bls_stream", "add_sub", "identity_timeout",
		"repeat_decoupled", "cancel_watch_stream", "bls_chain", "bls_chain_async", "bls_overlap", "identity_fp32")
	s := startServer(t, repo)
	_, c := grpcClient(t, s)
	in0, in1 := []float32{1, 2, 3, 4}, []float32{10, 20, 30, 40}
	sum, diff := []float32{11, 22, 33, 44}, []float32{-9, -18, -27, -36}

	t.Run("sync call over HTTP with the name given as bytes", func(t *testing.T) {
		code, body := s.postJSON("/v2/models/bls_forward/infer", blsForwardBody("add_sub", nil, in0, in1))
		var a blsAnswer
		if code != http.StatusOK || json.Unmarshal(body, &a) != nil {
			t.Fatalf("%d %s", code, body)
		}
		if !slices.Equal(a.output("OUTPUT0"), sum) || !slices.Equal(a.output("OUTPUT1"), diff) {
			t.Fatalf("got %s", body)
		}
	})

	t.Run("sync call over gRPC", func(t *testing.T) {
		resp, err := c.ModelInfer(callCtx(t), &pb.ModelInferRequest{ModelName: "bls_forward",
			Inputs: []*pb.ModelInferRequest_InferInputTensor{
				{Name: "MODEL_NAME", Datatype: "BYTES", Shape: []int64{1}},
				{Name: "INPUT0", Datatype: "FP32", Shape: []int64{4}},
				{Name: "INPUT1", Datatype: "FP32", Shape: []int64{4}},
			},
			RawInputContents: [][]byte{ipctest.BYTES("add_sub"), ipctest.FP32(in0...), ipctest.FP32(in1...)}})
		if err != nil {
			t.Fatal(err)
		}
		if _, raw := outputByName(t, resp, "OUTPUT0"); string(raw) != string(ipctest.FP32(sum...)) {
			t.Fatalf("OUTPUT0 = %v", raw)
		}
	})

	// Each step's output is the next step's input; the server serves a
	// sync call on the goroutine that read it, as an ensemble step.
	t.Run("chains of calls, sync and async", func(t *testing.T) {
		in := []float32{1, 2, 3, 4}
		for _, tc := range []struct {
			model string
			shape []int64
		}{{"bls_chain", []int64{4}}, {"bls_chain_async", []int64{1, 4}}} {
			for i := range 3 {
				resp, err := c.ModelInfer(callCtx(t), &pb.ModelInferRequest{ModelName: tc.model,
					Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: tc.shape}},
					RawInputContents: [][]byte{ipctest.FP32(in...)}})
				if err != nil {
					t.Fatalf("%s, request %d: %v", tc.model, i, err)
				}
				if _, raw := outputByName(t, resp, "OUTPUT0"); string(raw) != string(ipctest.FP32(in...)) {
					t.Fatalf("%s, request %d: OUTPUT0 = %v", tc.model, i, raw)
				}
			}
		}
	})

	// While the server serves one call of a request (a slow one), another
	// call the same request makes from another thread is answered.
	t.Run("a quick call is not held up by a slow one of the same request", func(t *testing.T) {
		resp, err := c.ModelInfer(callCtx(t), &pb.ModelInferRequest{ModelName: "bls_overlap",
			Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "SLEEP_MS", Datatype: "INT32", Shape: []int64{1}}},
			RawInputContents: [][]byte{ipctest.INT32(1000)}})
		if err != nil {
			t.Fatal(err)
		}
		if _, raw := outputByName(t, resp, "FAST_FIRST"); string(raw) != string(ipctest.INT32(1)) {
			t.Fatalf("FAST_FIRST = %v, want 1: the quick call waited for the slow one", raw)
		}
	})

	// An error before the request reached the callee carries the prefix
	// Triton's Python backend gives it.
	t.Run("errors of the callee keep Triton's texts", func(t *testing.T) {
		for _, tc := range []struct {
			name, model string
			in1         []float32
			code        int
			want        string
		}{
			{"missing input", "add_sub", nil, http.StatusBadRequest,
				"Model add_sub - Error when running inference: expected 2 inputs but got 1 inputs for model 'add_sub'. Got input(s) ['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all required input(s)."},
			{"unknown model", "no_such_model", in1, http.StatusBadRequest, "Model no_such_model - Error when running inference: Request for unknown model: 'no_such_model' is not found"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				code, body := s.postJSON("/v2/models/bls_forward/infer", blsForwardBody(tc.model, nil, in0, tc.in1))
				if code != tc.code || errorText(body) != tc.want {
					t.Fatalf("got %d %s, want %d %q", code, body, tc.code, tc.want)
				}
			})
		}
	})

	t.Run("async execute with many calls in flight", func(t *testing.T) {
		const n = 8
		results := make([]inferResult, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = postInfer(s.HTTP, "bls_forward_async", map[string]any{"inputs": []map[string]any{
					{"name": "MODEL_NAME", "datatype": "BYTES", "shape": []int{1, 1}, "data": []string{"add_sub"}},
					{"name": "INPUT0", "datatype": "FP32", "shape": []int{1, 4}, "data": in0},
					{"name": "INPUT1", "datatype": "FP32", "shape": []int{1, 4}, "data": []float32{float32(i), 0, 0, 0}},
				}})
			}()
		}
		wg.Wait()
		most := 0.0
		for i, r := range results {
			var a blsAnswer
			if r.err != nil || r.code != http.StatusOK || json.Unmarshal(r.body, &a) != nil {
				t.Fatalf("request %d: %d %s %v", i, r.code, r.body, r.err)
			}
			if got := a.output("OUTPUT0"); len(got) != 4 || got[0] != 1+float32(i) || got[3] != 4 {
				t.Fatalf("request %d: OUTPUT0 = %v", i, got)
			}
			most = max(most, a.Parameters["in_flight"].(float64))
		}
		// Eight requests sent together fall in one batch (the queue waits
		// 500 ms for more), whose BLS calls are all in flight at once.
		if most < 2 {
			t.Fatalf("at most %v BLS calls were in flight together, want several", most)
		}
	})

	t.Run("timeout expires in the callee's queue", func(t *testing.T) {
		// Two slow requests fill the callee's instance and its pipeline,
		// so the BLS request waits in the queue, where its own timeout
		// (1 ms, allowed by the queue policy) expires.
		wg := fillIdentityTimeout(t, s, 1500)
		code, body := s.postJSON("/v2/models/bls_forward/infer",
			blsForwardBody("identity_timeout", map[string]any{"timeout_us": 1000, "add_batch_dim": true}, in0, nil))
		if code != http.StatusServiceUnavailable || errorText(body) != "Request timeout expired" {
			t.Fatalf("got %d %s, want 503 Request timeout expired", code, body)
		}
		wg.Wait()
		// A timeout the queue does not reach is handed to the callee.
		code, body = s.postJSON("/v2/models/bls_forward/infer",
			blsForwardBody("identity_timeout", map[string]any{"timeout_us": 11000000000, "add_batch_dim": true}, in0, nil))
		var a blsAnswer
		if code != http.StatusOK || json.Unmarshal(body, &a) != nil || !slices.Equal(a.output("OUTPUT0"), in0) {
			t.Fatalf("%d %s", code, body)
		}
		waitFor(t, 10*time.Second, "the callee to log the BLS request's timeout", func() bool {
			return strings.Contains(s.Log(), "Request timeout: 11000000000")
		})
	})

	// The client gives up while its model waits for a BLS call served by
	// the client's own reader: the client hears at once, the call goes on
	// to its end elsewhere, and the model, answered, serves the next one.
	t.Run("a client that gives up while its model waits for a call", func(t *testing.T) {
		fillIdentityTimeout(t, s, 1000)
		ctx, cancel := context.WithCancel(callCtx(t))
		req := &pb.ModelInferRequest{ModelName: "bls_forward",
			Parameters: map[string]*pb.InferParameter{"add_batch_dim": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}}},
			Inputs: []*pb.ModelInferRequest_InferInputTensor{
				{Name: "MODEL_NAME", Datatype: "BYTES", Shape: []int64{1}},
				{Name: "INPUT0", Datatype: "FP32", Shape: []int64{4}},
			},
			RawInputContents: [][]byte{ipctest.BYTES("identity_timeout"), ipctest.FP32(in0...)}}
		errc := make(chan error, 1)
		go func() {
			_, err := c.ModelInfer(ctx, req)
			errc <- err
		}()
		waitInFlight(t, s, "bls_forward", 1, 30*time.Second, "the request in bls_forward's stub")
		cancel()
		if err := <-errc; status.Code(err) != codes.Canceled {
			t.Fatalf("got %v, want Canceled", err)
		}
		resp, err := c.ModelInfer(callCtx(t), req)
		if err != nil {
			t.Fatal(err)
		}
		if _, raw := outputByName(t, resp, "OUTPUT0"); string(raw) != string(ipctest.FP32(in0...)) {
			t.Fatalf("OUTPUT0 = %v", raw)
		}
	})

	t.Run("decoupled BLS streams to a gRPC client", func(t *testing.T) {
		st, err := c.ModelStreamInfer(callCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(blsStreamRequest("s", 0, 5, 6, 7)); err != nil {
			t.Fatal(err)
		}
		got := streamInt32(t, st)
		if len(got) != 4 || got[0]["OUT"] != 5 || got[1]["OUT"] != 6 || got[2]["OUT"] != 7 || got[3]["CANCELLED"] != 0 {
			t.Fatalf("streamed %v, want OUT 5, 6, 7 then CANCELLED false", got)
		}
		_ = st.CloseSend()
	})

	t.Run("ResponseIterator.cancel cancels the callee", func(t *testing.T) {
		st, err := c.ModelStreamInfer(callCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(blsStreamRequest("c", 3, 0)); err != nil {
			t.Fatal(err)
		}
		got := streamInt32(t, st)
		// The callee streams a tick every 10 ms for 30 s unless cancelled;
		// the caller cancels after three, a few more may be on the way.
		if len(got) < 4 || got[len(got)-1]["CANCELLED"] != 1 || len(got) > 100 {
			t.Fatalf("streamed %v, want 3 or a few more ticks, then CANCELLED true", got)
		}
		// The stub's log line travels apart from the responses.
		waitFor(t, 10*time.Second, "the callee to log its cancellation", func() bool {
			return strings.Contains(s.Log(), "cancel_watch: request '' cancelled")
		})
		_ = st.CloseSend()
	})

	t.Run("gRPC status of a callee error", func(t *testing.T) {
		_, err := c.ModelInfer(callCtx(t), &pb.ModelInferRequest{ModelName: "bls_forward",
			Inputs: []*pb.ModelInferRequest_InferInputTensor{
				{Name: "MODEL_NAME", Datatype: "BYTES", Shape: []int64{1}},
				{Name: "INPUT0", Datatype: "FP32", Shape: []int64{4}},
			},
			RawInputContents: [][]byte{ipctest.BYTES("add_sub"), ipctest.FP32(in0...)}})
		wantStatus(t, err, codes.InvalidArgument, "but missing required input(s) ['INPUT1']")
	})
}

// fillIdentityTimeout sends identity_timeout two requests that sleep
// sleepMS each, which fill its instance and pipeline, and returns once
// its stub holds both; the returned group ends with them (t.Cleanup
// waits for it too).
func fillIdentityTimeout(t *testing.T, s *server, sleepMS int) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	slow := map[string]any{"parameters": map[string]any{"sleep_ms": sleepMS},
		"inputs": []map[string]any{{"name": "INPUT0", "datatype": "FP32", "shape": []int{1, 1}, "data": []float32{0}}}}
	for range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); postInfer(s.HTTP, "identity_timeout", slow) }()
	}
	t.Cleanup(wg.Wait)
	waitInFlight(t, s, "identity_timeout", 2, 30*time.Second, "two requests in identity_timeout's stub")
	return &wg
}
