package main

// End-to-end tests of Go-native models (backend: "go"): built on demand by
// the supervisor from testdata/models/go_*, served over HTTP and gRPC, and
// restarted like Python stubs when they panic or are killed.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

type goInferOut struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
	Data     []int32 `json:"data"`
}

// goInfer sends IN0 (INT32) to model and returns the status and, on
// success, OUT0; on failure the error text.
func goInfer(t *testing.T, s *server, model string, shape []int64, vals ...int32) (int, goInferOut, string) {
	t.Helper()
	code, body := s.postJSON("/v2/models/"+model+"/infer", map[string]any{
		"inputs": []map[string]any{{"name": "IN0", "datatype": "INT32", "shape": shape, "data": vals}},
	})
	var r struct {
		Outputs []goInferOut `json:"outputs"`
		Error   string       `json:"error"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("infer %s: %v: %s", model, err, body)
	}
	if code != 200 {
		return code, goInferOut{}, r.Error
	}
	if len(r.Outputs) != 1 || r.Outputs[0].Name != "OUT0" {
		t.Fatalf("infer %s: outputs %s", model, body)
	}
	return code, r.Outputs[0], ""
}

func TestGoModels(t *testing.T) {
	slow(t)
	repo := modelsRepo(t)
	// The Go models are built from their sources inside this module; the
	// repository is used in place and only the Go models are loaded.
	s := startServer(t, repo, "--model-control-mode", "explicit",
		"--load-model", "go_minimal", "--load-model", "go_minimal_batch",
		"--load-model", "go_panic", "--load-model", "go_repeat", "--load-model", "go_add_sub",
		"--stub-restart-backoff", "10ms")

	t.Run("minimal", func(t *testing.T) {
		code, out, msg := goInfer(t, s, "go_minimal", []int64{4}, 1, 2, 3, 4)
		if code != 200 || fmt.Sprint(out.Data) != "[1 2 3 4]" || fmt.Sprint(out.Shape) != "[4]" || out.Datatype != "INT32" {
			t.Fatalf("go_minimal: %d %+v %s", code, out, msg)
		}
		if st := oneStub(t, s, "go_minimal"); st.Kind != "go" || st.State != "ready" {
			t.Fatalf("stub status %+v", st)
		}
	})

	t.Run("minimal_batch", func(t *testing.T) {
		// Concurrent single requests (which the dynamic batcher may merge)
		// and one request of batch 2: each gets back exactly its own rows.
		var wg sync.WaitGroup
		errs := make(chan string, 9)
		for i := range int32(8) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				want := []int32{i, i + 1, i + 2, i + 3}
				code, out, msg := goInfer(t, s, "go_minimal_batch", []int64{1, 4}, want...)
				if code != 200 || fmt.Sprint(out.Data) != fmt.Sprint(want) || fmt.Sprint(out.Shape) != "[1 4]" {
					errs <- fmt.Sprintf("request %d: %d %+v %s", i, code, out, msg)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Error(e)
		}
		code, out, msg := goInfer(t, s, "go_minimal_batch", []int64{2, 4}, 1, 2, 3, 4, 5, 6, 7, 8)
		if code != 200 || fmt.Sprint(out.Data) != "[1 2 3 4 5 6 7 8]" || fmt.Sprint(out.Shape) != "[2 4]" {
			t.Fatalf("batch of 2: %d %+v %s", code, out, msg)
		}
	})

	t.Run("add_sub", func(t *testing.T) {
		x, y := make([]float32, 16), make([]float32, 16)
		for i := range x {
			x[i], y[i] = float32(i), float32(2*i)
		}
		var resp struct {
			Outputs []struct {
				Name string    `json:"name"`
				Data []float32 `json:"data"`
			} `json:"outputs"`
		}
		code, body := s.postJSON("/v2/models/go_add_sub/infer", map[string]any{"inputs": []map[string]any{
			{"name": "INPUT0", "shape": []int{1, 16}, "datatype": "FP32", "data": x},
			{"name": "INPUT1", "shape": []int{1, 16}, "datatype": "FP32", "data": y},
		}})
		if err := json.Unmarshal(body, &resp); code != 200 || err != nil || len(resp.Outputs) != 2 {
			t.Fatalf("go_add_sub: %d %s", code, body)
		}
		for _, o := range resp.Outputs {
			for i, v := range o.Data {
				want := x[i] + y[i]
				if o.Name == "OUTPUT1" {
					want = x[i] - y[i]
				}
				if v != want {
					t.Fatalf("%s[%d] = %v, want %v", o.Name, i, v, want)
				}
			}
		}
	})

	t.Run("repeat_decoupled_grpc_stream", func(t *testing.T) {
		if s.GRPC == "" {
			t.Skip("no gRPC listener")
		}
		conn, err := grpc.NewClient(s.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		st, err := pb.NewGRPCInferenceServiceClient(conn).ModelStreamInfer(ctx)
		if err != nil {
			t.Fatal(err)
		}
		vals := []int32{5, 6, 7}
		raw := make([]byte, 0, 4*len(vals))
		for _, v := range vals {
			raw = binary.LittleEndian.AppendUint32(raw, uint32(v))
		}
		req := &pb.ModelInferRequest{ModelName: "go_repeat", Id: "r",
			Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "INT32", Shape: []int64{3}}},
			RawInputContents: [][]byte{raw}}
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range recvStream(t, st) {
			r := m.InferResponse
			outs := map[string]uint32{}
			for i, o := range r.GetOutputs() {
				outs[o.Name] = binary.LittleEndian.Uint32(r.RawOutputContents[i])
			}
			if len(outs) > 0 {
				got = append(got, fmt.Sprintf("%d@%d", int32(outs["OUT"]), outs["IDX"]))
			}
		}
		if strings.Join(got, " ") != "5@0 6@1 7@2" {
			t.Fatalf("streamed %v, want [5@0 6@1 7@2]", got)
		}
	})

	t.Run("panic_restarts_stub", func(t *testing.T) {
		before := oneStub(t, s, "go_panic")
		code, _, msg := goInfer(t, s, "go_panic", []int64{4}, -1, 0, 0, 0)
		if code == 200 || !strings.Contains(msg, "died while executing the request") || !strings.Contains(msg, "exit status 2") {
			t.Fatalf("panicking request: %d %q, want the stub death reported", code, msg)
		}
		goRestarted(t, s, "go_panic", before, "exit status 2", 9, 8, 7, 6)
		if log := s.Log(); !strings.Contains(log, "panic: go_panic: IN0[0] == -1") {
			t.Fatalf("the panic is not in the server log:\n%s", log)
		}
	})

	t.Run("sigkill_restarts_stub", func(t *testing.T) {
		before := oneStub(t, s, "go_minimal")
		if before.PID <= 0 {
			t.Fatalf("no pid: %+v", before)
		}
		if err := syscall.Kill(before.PID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		goRestarted(t, s, "go_minimal", before, "signal: killed", 4, 3, 2, 1)
	})
}

// goRestarted waits until model's stub, which was before, has restarted
// once, then checks that it echoes vals and that its last exit cause names
// cause.
func goRestarted(t *testing.T, s *server, model string, before stubStatus, cause string, vals ...int32) {
	t.Helper()
	waitFor(t, 30*time.Second, model+" restarted", func() bool {
		st := oneStub(t, s, model)
		return st.Restarts == 1 && st.State == "ready" && st.PID != before.PID
	})
	code, out, msg := goInfer(t, s, model, []int64{int64(len(vals))}, vals...)
	if want := fmt.Sprint(vals); code != 200 || fmt.Sprint(out.Data) != want {
		t.Fatalf("after restart: %d %+v %s, want %s", code, out, msg, want)
	}
	if st := oneStub(t, s, model); !strings.Contains(st.LastCause, cause) {
		t.Fatalf("last exit cause %q, want it to contain %q", st.LastCause, cause)
	}
}
