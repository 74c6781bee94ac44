package main

// Large binary tensors over HTTP and gRPC: the binary part of a body is read from
// the socket straight into the stub's shared memory. These tests drive that
// path and its fallbacks (unaligned inputs, compressed and small bodies)
// for the bytes the model sees, and its failures (a body cut short, a
// client that hangs up, a stub that dies while the body arrives) for the
// memory they must give back.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
	"google.golang.org/grpc/codes"
)

// pairModel returns INPUT0 unchanged (its output is the input's own
// memory) and INPUT1 doubled (a new array the model computed from it).
const pairModel = `import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            a = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(r, "INPUT1").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", a), pb_utils.Tensor("OUTPUT1", b * 2)]))
        return out
`

const pairConfig = `name: "pair"
backend: "python"
max_batch_size: 0
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ -1 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ -1 ] }]
`

// fp32Ramp is n FP32 values from start upwards, little-endian.
func fp32Ramp(n int, start float32) []byte {
	b := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(start+float32(i)))
	}
	return b
}

// fp32Scaled is b's FP32 values times k.
func fp32Scaled(b []byte, k float32) []byte {
	out := make([]byte, len(b))
	for i := 0; i+4 <= len(b); i += 4 {
		binary.LittleEndian.PutUint32(out[i:], math.Float32bits(k*math.Float32frombits(binary.LittleEndian.Uint32(b[i:]))))
	}
	return out
}

// largeTensorRepo is a repository with pair and a one-input identity.
func largeTensorRepo(t *testing.T) string {
	repo := t.TempDir()
	httpWriteModel(t, repo, "pair", pairConfig, map[string]string{"model.py": pairModel})
	writeFP32Model(t, repo, "one", "", `import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", r.inputs()[0].as_numpy())]) for r in requests]
`)
	return repo
}

// waitPoolFree waits until every stub of model holds no shared memory: no
// block of a finished request is left behind.
func waitPoolFree(t *testing.T, s *server, model string) {
	t.Helper()
	waitFor(t, 10*time.Second, model+"'s shared memory to be free", func() bool {
		for _, st := range allStubs(t, s, model) {
			if st.PoolInUse != 0 {
				return false
			}
		}
		return true
	})
}

func TestLargeBinaryInputs(t *testing.T) {
	ipctest.RequirePython(t)
	s := startServer(t, largeTensorRepo(t))
	pairHeader := func(n0, n1 int) map[string]any {
		return map[string]any{
			"inputs": []map[string]any{
				{"name": "INPUT0", "shape": []int{n0}, "datatype": "FP32", "parameters": map[string]any{"binary_data_size": 4 * n0}},
				{"name": "INPUT1", "shape": []int{n1}, "datatype": "FP32", "parameters": map[string]any{"binary_data_size": 4 * n1}},
			},
			"parameters": map[string]any{"binary_data_output": true},
		}
	}
	for _, c := range []struct {
		name   string
		n0, n1 int
		gzip   bool
	}{
		// Both inputs start block-aligned: both are used in place.
		{"two large inputs", 1 << 18, 1 << 16, false},
		// INPUT1 starts 4 bytes past a block boundary: it is copied.
		{"second input unaligned", 1<<16 + 1, 1 << 16, false},
		// Below the size worth lending memory for.
		{"small body", 16, 16, false},
		// A compressed body is read whole and inflated as before.
		{"gzip body", 1 << 18, 1 << 16, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			in0, in1 := fp32Ramp(c.n0, 1), fp32Ramp(c.n1, -7)
			body, hdr := httpBinaryBody(t, pairHeader(c.n0, c.n1), in0, in1)
			headers := []string{"Inference-Header-Content-Length", strconv.Itoa(hdr)}
			if c.gzip {
				var z bytes.Buffer
				zw := gzip.NewWriter(&z)
				_, _ = zw.Write(body)
				_ = zw.Close()
				body = z.Bytes()
				headers = append(headers, "Content-Encoding", "gzip")
			}
			code, h, b := s.do("POST", "/v2/models/pair/infer", body, headers...)
			r := httpDecodeInfer(t, code, h, b)
			if got := r.Blobs["OUTPUT0"]; !bytes.Equal(got, in0) {
				t.Errorf("OUTPUT0: %d bytes differ from INPUT0's %d", len(got), len(in0))
			}
			if got := r.Blobs["OUTPUT1"]; !bytes.Equal(got, fp32Scaled(in1, 2)) {
				t.Errorf("OUTPUT1: %d bytes are not INPUT1 doubled", len(got))
			}
			waitPoolFree(t, s, "pair")
		})
	}
	t.Run("raw body", func(t *testing.T) {
		in := fp32Ramp(1<<18, 3)
		code, h, b := s.do("POST", "/v2/models/one/infer", in, "Inference-Header-Content-Length", "0")
		if code != http.StatusOK {
			t.Fatalf("raw body: %d %s", code, b)
		}
		hdr, err := strconv.Atoi(h.Get("Inference-Header-Content-Length"))
		if err != nil || hdr > len(b) || !bytes.Equal(b[hdr:], in) {
			t.Errorf("raw body: output of %d bytes (header %q) is not the input", len(b)-hdr, h.Get("Inference-Header-Content-Length"))
		}
		waitPoolFree(t, s, "one")
	})
}

// halfSent opens a connection and sends an infer request for one that
// declares a 1 MiB tensor but carries only its first half.
func halfSent(t *testing.T, s *server) (*net.TCPConn, []byte) {
	t.Helper()
	const n = 1 << 18
	in := fp32Ramp(n, 0)
	body, hdr := httpBinaryBody(t, map[string]any{
		"inputs":     []map[string]any{{"name": "INPUT0", "shape": []int{n}, "datatype": "FP32", "parameters": map[string]any{"binary_data_size": 4 * n}}},
		"parameters": map[string]any{"binary_data_output": true},
	}, in)
	addr := strings.TrimPrefix(s.HTTP, "http://")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	head := fmt.Sprintf("POST /v2/models/one/infer HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\nInference-Header-Content-Length: %d\r\n\r\n", addr, len(body), hdr)
	if _, err := c.Write(append([]byte(head), body[:hdr+len(in)/2]...)); err != nil {
		t.Fatal(err)
	}
	return c.(*net.TCPConn), body[hdr+len(in)/2:]
}

// waitHalfRead waits until the server has read the half sent: the stub's
// arena then holds the block it is read into.
func waitHalfRead(t *testing.T, s *server) {
	t.Helper()
	waitFor(t, 10*time.Second, "the body's block in the stub's arena", func() bool { return oneStub(t, s, "one").PoolInUse > 0 })
}

// regionsMapped counts the stub regions the server process maps.
func regionsMapped(t *testing.T, s *server) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", s.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 6 && strings.HasPrefix(f[5], "/memfd:stubvisor:") {
			inodes[f[4]] = true
		}
	}
	return len(inodes)
}

func TestLargeBinaryInputCutShort(t *testing.T) {
	ipctest.RequirePython(t)
	// net/http hands the handler the body as it arrives (fasthttp reads it
	// whole first), which is what these cases cut short.
	s := startServer(t, largeTensorRepo(t), "--stub-restart-backoff", "50ms", "--http-engine", "net/http")
	full := func(t *testing.T) {
		t.Helper()
		in := fp32Ramp(1<<18, 5)
		code, h, b := s.httpInferBinary("one", map[string]any{
			"inputs":     []map[string]any{{"name": "INPUT0", "shape": []int{1 << 18}, "datatype": "FP32", "parameters": map[string]any{"binary_data_size": 4 << 18}}},
			"parameters": map[string]any{"binary_data_output": true},
		}, in)
		if got := httpDecodeInfer(t, code, h, b).Blobs["OUTPUT0"]; !bytes.Equal(got, in) {
			t.Errorf("request after: output is not the input")
		}
	}
	for _, c := range []struct {
		name string
		// cut ends the request after the half was read, and checks the
		// reply the client gets, if any.
		cut func(t *testing.T, c *net.TCPConn, rest []byte)
	}{
		{"body shorter than declared", func(t *testing.T, c *net.TCPConn, _ []byte) {
			_ = c.CloseWrite()
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var msg bytes.Buffer
			_, _ = msg.ReadFrom(resp.Body)
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(errorText(msg.Bytes()), "failed to read the request body") {
				t.Errorf("cut body: %d %s, want 400 saying the body could not be read", resp.StatusCode, msg.Bytes())
			}
		}},
		{"client hangs up mid-tensor", func(t *testing.T, c *net.TCPConn, _ []byte) {
			_ = c.SetLinger(0)
			_ = c.Close()
		}},
		{"stub dies while the body arrives", func(t *testing.T, c *net.TCPConn, rest []byte) {
			st := oneStub(t, s, "one")
			if err := syscall.Kill(st.PID, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 30*time.Second, "the restarted stub", func() bool {
				now := oneStub(t, s, "one")
				return now.PID != st.PID && now.State == "ready"
			})
			if _, err := c.Write(rest); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var out bytes.Buffer
			_, _ = out.ReadFrom(resp.Body)
			hdr, _ := strconv.Atoi(resp.Header.Get("Inference-Header-Content-Length"))
			if resp.StatusCode != http.StatusOK || hdr > out.Len() || !bytes.Equal(out.Bytes()[hdr:], fp32Ramp(1<<18, 0)) {
				t.Errorf("request whose stub was replaced: %d, %d bytes, want 200 with the input back", resp.StatusCode, out.Len())
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, rest := halfSent(t, s)
			waitHalfRead(t, s)
			c.cut(t, conn, rest)
			waitPoolFree(t, s, "one")
			// The region of a replaced stub is unmapped once the block
			// lent from it is given back: one region a stub, pair's and
			// one's.
			waitFor(t, 10*time.Second, "one stub region mapped", func() bool { return regionsMapped(t, s) == 2 })
			full(t)
		})
	}
}

// Over gRPC the raw inputs of a large message are copied from the
// transport's frames straight into the stub's arena, each at a block-aligned
// place, for ModelInfer and for the requests of a stream alike.
func TestLargeGRPCInputs(t *testing.T) {
	ipctest.RequirePython(t)
	s := startServer(t, largeTensorRepo(t))
	_, client := grpcClient(t, s)
	request := func(n0, n1 int) (*pb.ModelInferRequest, []byte, []byte) {
		in0, in1 := fp32Ramp(n0, 1), fp32Ramp(n1, -7)
		return &pb.ModelInferRequest{
			ModelName: "pair",
			Inputs: []*pb.ModelInferRequest_InferInputTensor{
				{Name: "INPUT0", Datatype: "FP32", Shape: []int64{int64(n0)}},
				{Name: "INPUT1", Datatype: "FP32", Shape: []int64{int64(n1)}},
			},
			RawInputContents: [][]byte{in0, in1},
		}, in0, in1
	}
	check := func(t *testing.T, out *pb.ModelInferResponse, in0, in1 []byte) {
		t.Helper()
		if len(out.RawOutputContents) != 2 || !bytes.Equal(out.RawOutputContents[0], in0) || !bytes.Equal(out.RawOutputContents[1], fp32Scaled(in1, 2)) {
			t.Errorf("outputs are not INPUT0 and INPUT1 doubled")
		}
	}
	for _, c := range []struct {
		name   string
		n0, n1 int
		stream bool
	}{
		{"two large inputs", 1 << 18, 1 << 16, false},
		// INPUT0's size is no multiple of the alignment: INPUT1 is placed
		// at the next aligned offset, both in place.
		{"odd first size", 1<<16 + 1, 1 << 16, false},
		{"small message", 16, 16, false},
		{"stream", 1 << 18, 1 << 16, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, in0, in1 := request(c.n0, c.n1)
			if !c.stream {
				out, err := client.ModelInfer(callCtx(t), req)
				if err != nil {
					t.Fatal(err)
				}
				check(t, out, in0, in1)
			} else {
				st, err := client.ModelStreamInfer(callCtx(t))
				if err != nil {
					t.Fatal(err)
				}
				for range 3 {
					if err := st.Send(req); err != nil {
						t.Fatal(err)
					}
				}
				_ = st.CloseSend()
				for range 3 {
					m, err := st.Recv()
					if err != nil || m.ErrorMessage != "" {
						t.Fatalf("stream: %v %s", err, m.GetErrorMessage())
					}
					check(t, m.InferResponse, in0, in1)
				}
			}
			waitPoolFree(t, s, "pair")
		})
	}
	t.Run("unknown model", func(t *testing.T) {
		req, _, _ := request(1<<18, 16)
		req.ModelName = "nope"
		_, err := client.ModelInfer(callCtx(t), req)
		wantStatus(t, err, codes.InvalidArgument, "Request for unknown model: 'nope'")
	})
}
