package main

// End-to-end tests of request cancellation: a client that gives up (a
// cancelled gRPC call, a closed gRPC stream, an HTTP client that hangs up)
// makes is_cancelled() true inside the running execute, for Python and Go
// models (testdata/models/cancel_watch, cancel_watch_stream and
// go_cancel_watch log what they see).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// watchRequest asks a cancel_watch model to wait up to 30 s for its
// cancellation.
func watchRequest(model, id string) *pb.ModelInferRequest {
	return &pb.ModelInferRequest{ModelName: model, Id: id,
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "WAIT_MS", Datatype: "UINT32", Shape: []int64{1}}},
		RawInputContents: [][]byte{ipctest.INT32(30000)}}
}

// waitLog waits until the server log has a line containing text.
func waitLog(t *testing.T, s *server, text string) {
	t.Helper()
	waitFor(t, 20*time.Second, fmt.Sprintf("log line %q", text), func() bool { return strings.Contains(s.Log(), text) })
}

func TestCancellation(t *testing.T) {
	slow(t)
	ipctest.RequirePython(t)
	// The repository is used in place: Go models build from their sources
	// inside this module.
	repo := modelsRepo(t)
	s := startServer(t, repo, "--model-control-mode", "explicit",
		"--load-model", "cancel_watch", "--load-model", "cancel_watch_stream", "--load-model", "go_cancel_watch")
	_, c := grpcClient(t, s)

	for _, model := range []string{"cancel_watch", "go_cancel_watch"} {
		t.Run(model+" gRPC call cancelled", func(t *testing.T) {
			id := model + "-grpc"
			ctx, cancel := context.WithCancel(callCtx(t))
			done := make(chan error, 1)
			go func() {
				_, err := c.ModelInfer(ctx, watchRequest(model, id))
				done <- err
			}()
			waitLog(t, s, model+": request '"+id+"' running")
			cancel()
			wantStatus(t, <-done, codes.Canceled, "")
			waitLog(t, s, model+": request '"+id+"' cancelled")
		})

		t.Run(model+" HTTP client hangs up", func(t *testing.T) {
			id := model + "-http"
			body, err := json.Marshal(map[string]any{"id": id, "inputs": []map[string]any{
				{"name": "WAIT_MS", "datatype": "UINT32", "shape": []int{1}, "data": []int{30000}}}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, "POST", s.HTTP+"/v2/models/"+model+"/infer", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			// A transport of its own, so the hang-up closes this
			// connection and no other.
			tr := &http.Transport{}
			t.Cleanup(tr.CloseIdleConnections)
			done := make(chan error, 1)
			go func() {
				resp, err := (&http.Client{Transport: tr}).Do(req)
				if err == nil {
					resp.Body.Close()
				}
				done <- err
			}()
			waitLog(t, s, model+": request '"+id+"' running")
			cancel()
			if err := <-done; err == nil {
				t.Fatal("the request completed before the client hung up")
			}
			waitLog(t, s, model+": request '"+id+"' cancelled")
		})
	}

	t.Run("decoupled model, gRPC stream closed", func(t *testing.T) {
		ctx, cancel := context.WithCancel(callCtx(t))
		st, err := c.ModelStreamInfer(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(watchRequest("cancel_watch_stream", "stream")); err != nil {
			t.Fatal(err)
		}
		// The model streams a tick every 10 ms: the first one shows it runs.
		m, err := st.Recv()
		if err != nil || m.ErrorMessage != "" {
			t.Fatalf("first response: %v %v", m, err)
		}
		cancel()
		waitLog(t, s, "cancel_watch: request 'stream' cancelled")
	})
}
