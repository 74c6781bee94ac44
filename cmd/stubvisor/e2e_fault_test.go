package main

// Fault tests: what an operator does to a server (kill -9 a stub, hang a
// model, SIGTERM mid-work, stall a request body, crash-loop a model), and
// what the server must promise in return: every request answered within a
// bound, every surface telling the same story, nothing left running.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

// faultSleepExecute is the execute method of faultSleepModel: an FP32 echo
// that sleeps for the request parameter "sleep" (seconds) first. It needs
// json, time and pb_utils imported.
const faultSleepExecute = `
    def execute(self, requests):
        out = []
        for r in requests:
            time.sleep(float(json.loads(r.parameters()).get("sleep", 0)))
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return out
`

// faultSleepModel is a one-instance-group FP32 echo whose execute sleeps
// for the request parameter "sleep" (seconds) first.
const faultSleepModel = `
import json, time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:` + faultSleepExecute

// sleepRequest is an infer request body for faultSleepModel.
func sleepRequest(secs float64) map[string]any {
	return map[string]any{
		"parameters": map[string]any{"sleep": secs},
		"inputs":     []map[string]any{{"name": "INPUT0", "shape": []int{1}, "datatype": "FP32", "data": []float32{1}}},
	}
}

// timedInfer is one request's outcome and how long it took.
type timedInfer struct {
	inferResult
	took time.Duration
}

func timedPost(base, model string, req any) timedInfer {
	start := time.Now()
	r := postInfer(base, model, req)
	return timedInfer{r, time.Since(start)}
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && !strings.HasPrefix(strings.TrimSpace(string(b[i+1:])), "Z")
}

// ignoredSignals is the SigIgn mask of a process.
func ignoredSignals(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
	t.Fatalf("no SigIgn in /proc/%d/status", pid)
	return 0
}

// A client that sends headers and part of a body is cut off once the body
// stalls for --request-body-timeout, over HTTP and over gRPC (where the
// bound is the timeout plus the largest message at 8 MiB/s: 1.5 s here).
func TestFaultStalledRequestBody(t *testing.T) {
	slow(t)
	ipctest.RequirePython(t)
	s := startServer(t, copyRepo(t, "add_sub"), "--request-body-timeout", "1s", "--grpc-max-message-size", "4194304")
	const bound = 3 * time.Second // the 1 s timeout plus slack for a busy machine

	t.Run("http", func(t *testing.T) {
		addr := strings.TrimPrefix(s.HTTP, "http://")
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: %s\r\nContent-Length: 1000\r\n\r\n{\"inputs\":", addr)
		start := time.Now()
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, err = io.Copy(io.Discard, c) // returns when the server closes the connection
		if took := time.Since(start); err != nil || took > bound {
			t.Errorf("connection with a stalled body closed after %s (%v), want within %s", took, err, bound)
		}
	})

	t.Run("grpc", func(t *testing.T) {
		c, err := net.Dial("tcp", s.GRPC)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
			t.Fatal(err)
		}
		fr := http2.NewFramer(c, c)
		if err := fr.WriteSettings(); err != nil {
			t.Fatal(err)
		}
		var hdr bytes.Buffer
		enc := hpack.NewEncoder(&hdr)
		for _, f := range [][2]string{
			{":method", "POST"}, {":scheme", "http"}, {":authority", s.GRPC},
			{":path", "/inference.GRPCInferenceService/ModelInfer"},
			{"content-type", "application/grpc"}, {"te", "trailers"},
		} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hdr.Bytes(), EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		// A message announced as 1000 bytes, of which 10 come.
		msg := make([]byte, 5+10)
		binary.BigEndian.PutUint32(msg[1:5], 1000)
		if err := fr.WriteData(1, false, msg); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("no end of the stalled stream: %v after %s", err, time.Since(start))
			}
			ended := false
			switch f := f.(type) {
			case *http2.RSTStreamFrame:
				ended = f.StreamID == 1
			case *http2.HeadersFrame:
				ended = f.StreamID == 1 && f.StreamEnded()
			case *http2.GoAwayFrame:
				ended = true
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = fr.WriteSettingsAck()
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					_ = fr.WritePing(true, f.Data)
				}
			}
			if ended {
				break
			}
		}
		if took := time.Since(start); took > bound {
			t.Errorf("stalled gRPC message ended after %s, want within %s", took, bound)
		}
	})
}

// sleepBinaryBody is a binary-extension request for faultSleepModel with
// n FP32 elements, asking for the output in binary too.
func sleepBinaryBody(t *testing.T, n int, secs float64) ([]byte, int) {
	return httpBinaryBody(t, map[string]any{
		"parameters": map[string]any{"sleep": secs},
		"inputs":     []map[string]any{{"name": "INPUT0", "shape": []int{n}, "datatype": "FP32", "parameters": map[string]any{"binary_data_size": 4 * n}}},
		"outputs":    []map[string]any{{"name": "OUTPUT0", "parameters": map[string]any{"binary_data": true}}},
	}, make([]byte, 4*n))
}

// Requests in flight may hold at most --max-inflight-request-bytes of
// request data, HTTP and gRPC together: past it a request is refused with
// 503 or RESOURCE_EXHAUSTED, and served again once the others are done.
func TestFaultInflightRequestBudget(t *testing.T) {
	slow(t)
	ipctest.RequirePython(t)
	repo := t.TempDir()
	writeFP32Model(t, repo, "sleepy", "", faultSleepModel)
	s := startServer(t, repo, "--max-inflight-request-bytes", strconv.Itoa(8<<20))
	_, client := grpcClient(t, s)
	const n = 3 << 20 / 4 // 3 MiB of FP32
	postBinary := func(secs float64) (int, []byte) {
		body, hdr := sleepBinaryBody(t, n, secs)
		code, _, b := s.do("POST", "/v2/models/sleepy/infer", body, "Inference-Header-Content-Length", strconv.Itoa(hdr))
		return code, b
	}
	grpcInfer := func(elems int, secs float64) error {
		_, err := client.ModelInfer(callCtx(t), &pb.ModelInferRequest{
			ModelName:        "sleepy",
			Parameters:       map[string]*pb.InferParameter{"sleep": {ParameterChoice: &pb.InferParameter_DoubleParam{DoubleParam: secs}}},
			Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{int64(elems)}}},
			RawInputContents: [][]byte{make([]byte, 4*elems)},
		})
		return err
	}
	slow := make(chan int, 1)
	go func() { code, _ := postBinary(3); slow <- code }()
	waitInFlight(t, s, "sleepy", 1, 20*time.Second, "the first request to run")
	queued := make(chan error, 1)
	go func() { queued <- grpcInfer(n, 0) }()
	waitInFlight(t, s, "sleepy", 2, 20*time.Second, "the second request to queue")

	if code, body := postBinary(0); code != http.StatusServiceUnavailable || !strings.Contains(errorText(body), "--max-inflight-request-bytes") {
		t.Errorf("HTTP request over the budget: %d %s, want 503 naming the flag", code, body)
	}
	wantStatus(t, grpcInfer(n, 0), codes.ResourceExhausted, "--max-inflight-request-bytes")
	wantStatus(t, grpcInfer(9<<20/4, 0), codes.ResourceExhausted, "exceeds the server's budget")

	if code := <-slow; code != 200 {
		t.Errorf("first request: %d", code)
	}
	if err := <-queued; err != nil {
		t.Errorf("queued request: %v", err)
	}
	if code, body := postBinary(0); code != 200 {
		t.Errorf("request after the budget freed: %d %s", code, body)
	}
	if err := grpcInfer(n, 0); err != nil {
		t.Errorf("gRPC request after the budget freed: %v", err)
	}
}

// Clients that give up mid-request, over HTTP and gRPC, while their
// requests run, wait in a stub's ring or wait in the model's queue: each
// gets its cancellation, the server keeps serving, and (under make test's
// -race run, where the binary is built with the race detector) nothing
// touches a pooled request after its caller left.
func TestFaultClientsCancelMidRequest(t *testing.T) {
	ipctest.RequirePython(t)
	repo := t.TempDir()
	writeFP32Model(t, repo, "one", "", faultSleepModel)
	writeFP32Model(t, repo, "two", "instance_group [{ kind: KIND_CPU count: 2 }]", faultSleepModel)
	s := startServer(t, repo)
	_, client := grpcClient(t, s)
	hc := &http.Client{}
	var wg sync.WaitGroup
	for i := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			model := []string{"one", "two"}[i%2]
			// Requests run 0.2 s and callers give up after 0.05 to 0.3 s:
			// some leave while running, some while queued, some never.
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(50+i*10)*time.Millisecond)
			defer cancel()
			if i%3 == 0 {
				_, _ = client.ModelInfer(ctx, &pb.ModelInferRequest{
					ModelName:        model,
					Parameters:       map[string]*pb.InferParameter{"sleep": {ParameterChoice: &pb.InferParameter_DoubleParam{DoubleParam: 0.2}}},
					Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{3}}},
					RawInputContents: [][]byte{make([]byte, 12)},
				})
				return
			}
			body, _ := json.Marshal(sleepRequest(0.2))
			req, _ := http.NewRequestWithContext(ctx, "POST", s.HTTP+"/v2/models/"+model+"/infer", bytes.NewReader(body))
			if resp, err := hc.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	for _, model := range []string{"one", "two"} {
		if r := postInfer(s.HTTP, model, sleepRequest(0)); r.err != nil || r.code != 200 {
			t.Errorf("%s after the cancellations: %d %s %v", model, r.code, r.body, r.err)
		}
	}
}
