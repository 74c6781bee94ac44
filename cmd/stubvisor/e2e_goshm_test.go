package main

// End-to-end tests of system shared memory with Go-native models: the Go
// stub maps the client's region itself, reads inputs from it and writes
// outputs into it, as the Python stub does.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// stubMaps reports whether process pid maps the file at path.
func stubMaps(t *testing.T, pid int, path string) bool {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), " "+path+"\n") || strings.Contains(string(b), " "+path+" ")
}

func TestGoShm(t *testing.T) {
	repo := modelsRepo(t)
	// Go models build from their sources inside this module, so the
	// repository is used in place and only these models are loaded.
	s := startServer(t, repo, "--model-control-mode", "explicit",
		"--load-model", "go_identity_fp32", "--load-model", "go_minimal", "--allow-client-shm=true")
	register := func(t *testing.T, name, key string, offset, size int) {
		t.Helper()
		code, body := s.postJSON("/v2/systemsharedmemory/region/"+name+"/register", map[string]any{"key": key, "offset": offset, "byte_size": size})
		if code != 200 {
			t.Fatalf("register %s: %d %s", name, code, body)
		}
		t.Cleanup(func() {
			if code, body := s.postJSON("/v2/systemsharedmemory/region/"+name+"/unregister", nil); code != 200 {
				t.Errorf("unregister %s: %d %s", name, code, body)
			}
		})
	}
	infer := func(in, out map[string]any, n int) (int, []byte) {
		req := map[string]any{"inputs": []any{map[string]any{"name": "INPUT0", "datatype": "FP32", "shape": []int{n}, "parameters": in}}}
		if out != nil {
			req["outputs"] = []any{map[string]any{"name": "OUTPUT0", "parameters": out}}
		}
		return s.postJSON("/v2/models/go_identity_fp32/infer", req)
	}

	t.Run("zero copy in and out, at offsets, large tensor out of the pool", func(t *testing.T) {
		const n = 16 << 20 // 16 MiB, far above the pool's 1 MiB default
		const inOff, outOff = 4096 + 100, 8192 + 36
		in := newClientRegion(t, "go-big-in", n+8192)
		out := newClientRegion(t, "go-big-out", n+16384)
		// Only a window of each object is registered: offsets are
		// relative to it, and the window starts off a page boundary.
		register(t, "go_in", in.key, inOff, n)
		register(t, "go_out", out.key, outOff, n+64)
		for round := range 2 {
			// Written after registration: only a shared mapping sees it.
			win := in.mem[inOff : inOff+n]
			for i := 0; i < n; i += 4 {
				binary.LittleEndian.PutUint32(win[i:], math.Float32bits(float32(i/4+round)+0.25))
			}
			clear(out.mem)
			code, body := infer(shmParams("go_in", 0, n), shmParams("go_out", 64, n), n/4)
			if code != 200 {
				t.Fatalf("round %d: infer: %d %s", round, code, body)
			}
			var resp struct {
				Outputs []struct {
					Name       string          `json:"name"`
					Shape      []int64         `json:"shape"`
					Data       json.RawMessage `json:"data"`
					Parameters map[string]any  `json:"parameters"`
				} `json:"outputs"`
			}
			if err := json.Unmarshal(body, &resp); err != nil {
				t.Fatal(err)
			}
			if len(resp.Outputs) != 1 || resp.Outputs[0].Name != "OUTPUT0" || resp.Outputs[0].Data != nil ||
				fmt.Sprint(resp.Outputs[0].Shape) != fmt.Sprint([]int{n / 4}) {
				t.Fatalf("round %d: response %.300s", round, body)
			}
			if got := out.mem[outOff+64 : outOff+64+n]; !bytes.Equal(got, win) {
				t.Fatalf("round %d: the output window differs from the input", round)
			}
			if bytes.Count(out.mem[:outOff+64], []byte{0}) != outOff+64 || out.mem[outOff+64+n] != 0 {
				t.Fatalf("round %d: bytes written outside the output's place", round)
			}
		}
		if hw := stubHighWater(t, s, "go_identity_fp32"); hw >= n/8 {
			t.Fatalf("pool high water %d bytes: the tensor went through the pool", hw)
		}
	})

	t.Run("output region too small", func(t *testing.T) {
		r := newClientRegion(t, "go-small", 4096)
		register(t, "go_small", r.key, 0, 1024)
		copy(r.mem, bytes.Repeat([]byte{0x3f}, 16))
		code, body := infer(shmParams("go_small", 0, 16), shmParams("go_small", 512, 8), 4)
		const text = "shared memory size specified with the request for output 'OUTPUT0' (8 bytes) should be at least 16 bytes to hold the results"
		if code != 500 || !strings.Contains(string(body), text) {
			t.Fatalf("infer: %d %s, want 500 %q", code, body, text)
		}
		if !bytes.Equal(r.mem[512:528], make([]byte, 16)) {
			t.Fatalf("the output was written despite the error: %x", r.mem[512:528])
		}
		// The stub still serves, from its pool and from the region.
		code, body = infer(shmParams("go_small", 0, 16), shmParams("go_small", 512, 16), 4)
		if code != 200 || !bytes.Equal(r.mem[512:528], r.mem[:16]) {
			t.Fatalf("infer after the error: %d %s, region %x", code, body, r.mem[512:528])
		}
	})

	t.Run("gRPC, go_minimal, output into the input's region", func(t *testing.T) {
		r := newClientRegion(t, "go-grpc", 8192)
		_, c := grpcClient(t, s)
		ctx := callCtx(t)
		if _, err := c.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: "go_grpc", Key: r.key, Offset: 1000, ByteSize: 4096}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = c.SystemSharedMemoryUnregister(ctx, &pb.SystemSharedMemoryUnregisterRequest{Name: "go_grpc"})
		})
		want := ipctest.INT32(11, -22, 33, -44)
		copy(r.mem[1000+16:], want)
		resp, err := c.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "go_minimal",
			Inputs:  []*pb.ModelInferRequest_InferInputTensor{{Name: "IN0", Datatype: "INT32", Shape: []int64{4}, Parameters: grpcShmParams("go_grpc", 16, 16)}},
			Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUT0", Parameters: grpcShmParams("go_grpc", 2048, 16)}}})
		if err != nil {
			t.Fatalf("infer: %v", err)
		}
		for i, raw := range resp.RawOutputContents {
			if len(raw) != 0 {
				t.Errorf("shared memory output %d came back with %d raw bytes", i, len(raw))
			}
		}
		if got := r.mem[1000+2048 : 1000+2048+16]; !bytes.Equal(got, want) {
			t.Fatalf("OUT0 in the region = %x, want %x", got, want)
		}
	})

	t.Run("unregister unmaps the region in the stub", func(t *testing.T) {
		r := newClientRegion(t, "go-unmap", 4096)
		path := "/dev/shm" + r.key
		pid := oneStub(t, s, "go_identity_fp32").PID
		code, body := s.postJSON("/v2/systemsharedmemory/region/go_unmap/register", map[string]any{"key": r.key, "byte_size": 4096})
		if code != 200 {
			t.Fatalf("register: %d %s", code, body)
		}
		if stubMaps(t, pid, path) {
			t.Fatal("the stub maps the region before any request used it")
		}
		if code, body := infer(shmParams("go_unmap", 0, 16), nil, 4); code != 200 {
			t.Fatalf("infer: %d %s", code, body)
		}
		if !stubMaps(t, pid, path) {
			t.Fatal("the stub does not map the region a request used")
		}
		if code, body := s.postJSON("/v2/systemsharedmemory/region/go_unmap/unregister", nil); code != 200 {
			t.Fatalf("unregister: %d %s", code, body)
		}
		// The stub handles messages in order: once a later request is
		// answered, it has handled the UnmapRegion sent before it.
		code, body = s.postJSON("/v2/models/go_identity_fp32/infer", map[string]any{
			"inputs": []any{map[string]any{"name": "INPUT0", "datatype": "FP32", "shape": []int{1}, "data": []float32{1}}}})
		if code != 200 {
			t.Fatalf("infer: %d %s", code, body)
		}
		if stubMaps(t, pid, path) {
			t.Fatal("the stub still maps the region after unregister")
		}
	})
}
