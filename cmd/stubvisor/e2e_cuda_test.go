package main

// End-to-end tests of the CUDA shared memory extension. The test plays the
// client: it allocates device memory with the CUDA driver (the fake one
// built from supervisor/cuda/testdata/fakecuda.c on machines without a GPU,
// and the real one too when there is a GPU), exports IPC handles and
// registers them; the server and its stubs open them through the driver
// named by STUBVISOR_LIBCUDA.

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
	"github.com/stubvisor/stubvisor/supervisor/cuda"
	"github.com/stubvisor/stubvisor/supervisor/cuda/cudatest"
)

// deviceBuffer allocates size bytes on device 0, freed at cleanup.
func deviceBuffer(t *testing.T, d *cuda.Driver, size uint64) (*cuda.Mapping, []byte) {
	t.Helper()
	m, err := d.Alloc(0, size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	h, err := m.IPCHandle()
	if err != nil {
		t.Fatal(err)
	}
	return m, h
}

// fakeMappings counts the fake driver's device mappings in pid and its
// children (the stubs).
func fakeMappings(pid int) int {
	n := 0
	for _, p := range append([]int{pid}, childrenOf(pid)...) {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/maps")
		n += bytes.Count(b, []byte("memfd:fakecuda"))
	}
	return n
}

func TestCUDASharedMemory(t *testing.T) {
	slow(t)
	ipctest.RequirePython(t)
	for _, drv := range cudatest.Drivers(t) {
		t.Run(drv.Name, func(t *testing.T) { testCUDASharedMemory(t, drv) })
	}
}

func testCUDASharedMemory(t *testing.T, drv cudatest.Driver) {
	t.Setenv(cuda.EnvLibrary, drv.Path) // inherited by the server and its stubs
	d, err := cuda.LoadLibrary(drv.Path)
	if err != nil {
		t.Fatal(err)
	}
	// In place, because the Go model is built inside this module.
	repo := modelsRepo(t)
	s := startServer(t, repo, "--allow-client-shm=true", "--model-control-mode", "explicit",
		"--load-model", "identity_fp32", "--load-model", "cuda_device", "--load-model", "go_identity_fp32")
	_, c := grpcClient(t, s)
	ctx := callCtx(t)
	const size = 1 << 16
	in, inHandle := deviceBuffer(t, d, size)
	out, outHandle := deviceBuffer(t, d, size)
	register := func(name string, handle []byte, device, byteSize int) (int, string) {
		code, body := s.postJSON("/v2/cudasharedmemory/region/"+name+"/register", map[string]any{
			"raw_handle": map[string]string{"b64": base64.StdEncoding.EncodeToString(handle)}, "device_id": device, "byte_size": byteSize})
		return code, string(body)
	}
	if code, body := register("c_in", inHandle, 0, size); code != 200 {
		t.Fatalf("register over HTTP: %d %s", code, body)
	}
	if _, err := c.CudaSharedMemoryRegister(ctx, &pb.CudaSharedMemoryRegisterRequest{Name: "c_out", RawHandle: outHandle, ByteSize: size}); err != nil {
		t.Fatalf("register over gRPC: %v", err)
	}

	t.Run("status", func(t *testing.T) {
		var st []map[string]any
		s.getJSON("/v2/cudasharedmemory/status", &st)
		if len(st) != 2 || st[0]["name"] != "c_in" || st[0]["byte_size"] != float64(size) || st[1]["name"] != "c_out" {
			t.Fatalf("HTTP status: %v", st)
		}
		g, err := c.CudaSharedMemoryStatus(ctx, &pb.CudaSharedMemoryStatusRequest{Name: "c_out"})
		if err != nil || g.Regions["c_out"].GetByteSize() != size || g.Regions["c_out"].GetDeviceId() != 0 {
			t.Fatalf("gRPC status: %v %v", g, err)
		}
		_, err = c.SystemSharedMemoryStatus(ctx, &pb.SystemSharedMemoryStatusRequest{Name: "c_out"})
		wantStatus(t, err, codes.InvalidArgument, "The region named 'c_out' is registered as CUDA shared memory, not system shared memory")
	})

	infer := func(model string, inOff, outOff int, values ...float32) (int, string) {
		raw := ipctest.FP32(values...)
		if err := in.CopyFromHost(uint64(inOff), raw); err != nil {
			t.Fatal(err)
		}
		code, body := s.postJSON("/v2/models/"+model+"/infer", map[string]any{
			"inputs":  []map[string]any{{"name": "INPUT0", "datatype": "FP32", "shape": []int{len(values)}, "parameters": shmParams("c_in", inOff, len(raw))}},
			"outputs": []map[string]any{{"name": "OUTPUT0", "parameters": shmParams("c_out", outOff, len(raw))}},
		})
		return code, string(body)
	}
	readOut := func(off, n int) []byte {
		t.Helper()
		b := make([]byte, n)
		if err := out.CopyToHost(b, uint64(off)); err != nil {
			t.Fatal(err)
		}
		return b
	}

	t.Run("inputs copied to host by default", func(t *testing.T) {
		code, body := infer("identity_fp32", 128, 256, 1.5, -2, 3.25)
		if code != 200 || strings.Contains(body, `"data"`) {
			t.Fatalf("infer: %d %s", code, body)
		}
		if got := readOut(256, 12); !bytes.Equal(got, ipctest.FP32(1.5, -2, 3.25)) {
			t.Fatalf("output region holds %x", got)
		}
	})

	t.Run("GPU tensors through DLPack", func(t *testing.T) {
		code, body := infer("cuda_device", 4000, 5000, 1, 2, 3, 4)
		if code != 200 {
			t.Fatalf("infer: %d %s", code, body)
		}
		if got := readOut(5000, 16); !bytes.Equal(got, ipctest.FP32(2, 4, 6, 8)) {
			t.Fatalf("output region holds %x", got)
		}
	})

	t.Run("over gRPC", func(t *testing.T) {
		if err := in.CopyFromHost(64, ipctest.FP32(7, 8)); err != nil {
			t.Fatal(err)
		}
		_, err := c.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "cuda_device",
			Inputs:  []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{2}, Parameters: grpcShmParams("c_in", 64, 8)}},
			Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT0", Parameters: grpcShmParams("c_out", 9000, 8)}}})
		if err != nil {
			t.Fatal(err)
		}
		if got := readOut(9000, 8); !bytes.Equal(got, ipctest.FP32(14, 16)) {
			t.Fatalf("output region holds %x", got)
		}
	})

	t.Run("errors", func(t *testing.T) {
		fail := func(name string, code int, body, want string) {
			t.Helper()
			if code != 400 || !strings.Contains(body, want) {
				t.Errorf("%s: %d %s; want 400 with %q", name, code, body, want)
			}
		}
		// Triton's texts: the client learns only "invalid args" (the
		// cause goes to the log); a byte_size past the allocation names
		// the region.
		code, body := register("bad", bytes.Repeat([]byte{0xab}, 64), 0, 16)
		fail("garbage handle", code, body, "failed to register shared memory region: invalid args")
		code, body = register("big", inHandle, 0, 2*size)
		fail("byte_size past the allocation", code, body, "failed to register shared memory region 'big': invalid args")
		code, body = register("dev", inHandle, 7, 16)
		fail("no such device", code, body, "failed to register shared memory region: invalid args")
		for _, req := range []*pb.CudaSharedMemoryRegisterRequest{
			{Name: "short", RawHandle: []byte{1, 2, 3}, ByteSize: 16},
			{}, // NVIDIA's python_grpc_aio_test: no name, no handle
		} {
			_, err := c.CudaSharedMemoryRegister(ctx, req)
			if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || st.Message() != "failed to register shared memory region: invalid args" {
				t.Errorf("handle of %d bytes over gRPC: %v", len(req.RawHandle), err)
			}
		}
		code, body = register("c_in", inHandle, 0, 16)
		if code != 409 && code != 400 || !strings.Contains(body, "shared memory region 'c_in' already in manager") {
			t.Errorf("duplicate: %d %s", code, body)
		}
		only := func(region string, off, n int) (int, string) {
			code, raw := s.postJSON("/v2/models/identity_fp32/infer", map[string]any{
				"inputs": []map[string]any{{"name": "INPUT0", "datatype": "FP32", "shape": []int{n / 4}, "parameters": shmParams(region, off, n)}}})
			return code, string(raw)
		}
		code, body = only("c_in", size-4, 8)
		fail("input past the region", code, body, "Invalid offset + byte size for shared memory region: 'c_in'")
		code, body = only("nope", 0, 4)
		if code != 400 && code != 404 || !strings.Contains(body, "Unable to find shared memory region: 'nope'") {
			t.Errorf("unknown region: %d %s", code, body)
		}
		code, body = infer("go_identity_fp32", 0, 0, 1)
		if code == 200 || !strings.Contains(body, "only Python models read CUDA memory") {
			t.Errorf("Go model: %d %s", code, body)
		}
		var st []map[string]any
		s.getJSON("/v2/cudasharedmemory/status", &st)
		if len(st) != 2 {
			t.Errorf("failed registrations left regions behind: %v", st)
		}
	})

	t.Run("unregister closes every handle", func(t *testing.T) {
		if drv.Name != "fake" {
			t.Skip("counts the fake driver's mappings")
		}
		pid := s.cmd.Process.Pid
		if n := fakeMappings(pid); n < 2 {
			t.Fatalf("server and stubs map %d fake CUDA regions before unregister, want at least 2", n)
		}
		if code, body := s.postJSON("/v2/cudasharedmemory/unregister", nil); code != 200 {
			t.Fatalf("unregister: %d %s", code, body)
		}
		waitFor(t, 10*time.Second, "server and stubs to close the CUDA handles", func() bool { return fakeMappings(pid) == 0 })
		var st []map[string]any
		s.getJSON("/v2/cudasharedmemory/status", &st)
		if len(st) != 0 {
			t.Fatalf("status after unregister: %v", st)
		}
	})
}

// Without a driver the server starts and serves; CUDA registration answers
// Triton's text for a server without GPUs.
func TestCUDASharedMemoryNoDriver(t *testing.T) {
	t.Setenv(cuda.EnvLibrary, "/nonexistent/libcuda.so.1")
	s := startServer(t, copyRepo(t, "identity_fp32"), "--allow-client-shm=true")
	if code, body := s.postJSON("/v2/models/identity_fp32/infer", map[string]any{
		"inputs": []map[string]any{{"name": "INPUT0", "datatype": "FP32", "shape": []int{1}, "data": []float32{2.5}}}}); code != 200 {
		t.Fatalf("infer: %d %s", code, body)
	}
	handle := base64.StdEncoding.EncodeToString(make([]byte, 64))
	code, body := s.postJSON("/v2/cudasharedmemory/region/r/register", map[string]any{"raw_handle": map[string]string{"b64": handle}, "device_id": 0, "byte_size": 16})
	want := "failed to register CUDA shared memory region: 'r', GPUs not supported"
	if code != 400 || !strings.Contains(string(body), want) {
		t.Fatalf("register: %d %s; want 400 %q", code, body, fmt.Sprint(want))
	}
	// A handle that is not a cudaIpcMemHandle_t is invalid with or without
	// a GPU (NVIDIA's python_grpc_aio_test registers an empty one).
	_, c := grpcClient(t, s)
	_, err := c.CudaSharedMemoryRegister(context.Background(), &pb.CudaSharedMemoryRegisterRequest{})
	if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || st.Message() != "failed to register shared memory region: invalid args" {
		t.Fatalf("empty handle over gRPC: %v", err)
	}
}

// TestKindGPUWithoutGPUList loads a KIND_GPU group that lists no gpus on a
// machine whose CUDA driver reports two devices (the fake driver where there
// is no GPU): as in Triton the group gets every device, with count
// instances on each.
func TestKindGPUWithoutGPUList(t *testing.T) {
	ipctest.RequirePython(t)
	t.Setenv(cuda.EnvLibrary, cudatest.BuildFake(t))
	t.Setenv("FAKECUDA_DEVICES", "2")
	repo := copyRepo(t, "e2e_echo")
	cfg := httpFP32Config("gpu_echo", "instance_group [{ kind: KIND_GPU }]")
	src, err := os.ReadFile(filepath.Join(repo, "e2e_echo", "1", "model.py"))
	if err != nil {
		t.Fatal(err)
	}
	httpWriteModel(t, repo, "gpu_echo", cfg, map[string]string{"model.py": string(src)})
	s := startServer(t, repo)
	var mc struct {
		InstanceGroup []struct {
			Kind string  `json:"kind"`
			Gpus []int32 `json:"gpus"`
		} `json:"instance_group"`
	}
	s.getJSON("/v2/models/gpu_echo/config", &mc)
	if len(mc.InstanceGroup) != 1 || mc.InstanceGroup[0].Kind != "KIND_GPU" || !slices.Equal(mc.InstanceGroup[0].Gpus, []int32{0, 1}) {
		t.Fatalf("instance_group %+v, want KIND_GPU on gpus [0 1]", mc.InstanceGroup)
	}
	ms := stubsOf(t, s, "gpu_echo")
	if len(ms) != 1 || len(ms[0].Stubs) != 2 {
		t.Fatalf("stubs %+v, want one instance on each of the two devices", ms)
	}
	code, _, b := s.do("POST", "/v2/models/gpu_echo/infer", []byte(`{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","data":[2]}]}`))
	if code != 200 {
		t.Fatalf("infer: %d %s", code, b)
	}
}
