package main

// End-to-end tests of the system shared memory extension: regions the test
// creates in /dev/shm, registered over HTTP and gRPC, inputs read and
// outputs written by the model in the stub without passing through the
// server.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// clientRegion is a POSIX shm object the test owns, mapped in the test.
type clientRegion struct {
	key string // "/e2e-client-..."
	mem []byte
}

// newClientRegion creates /dev/shm/e2e-client-<name>-<pid> of size bytes,
// mapped; it is unmapped and unlinked at cleanup.
func newClientRegion(t *testing.T, name string, size int) *clientRegion {
	t.Helper()
	file := fmt.Sprintf("e2e-client-%s-%d", name, unix.Getpid())
	path := "/dev/shm/" + file
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		t.Fatalf("create %s: %v", path, err)
	}
	t.Cleanup(func() { _ = unix.Unlink(path) })
	defer unix.Close(fd)
	return &clientRegion{key: "/" + file, mem: ipctest.MapShared(t, fd, size)}
}

// shmParams are the tensor parameters naming a place in a region.
func shmParams(region string, offset, size int) map[string]any {
	return map[string]any{"shared_memory_region": region, "shared_memory_offset": offset, "shared_memory_byte_size": size}
}

// shmTensor is one dtype's test tensor: its raw bytes in Triton's layout.
type shmTensor struct {
	dtype string
	shape []int64
	raw   []byte
}

// dtypeTensors returns a 3-element tensor of every type identity_all has
// an input for (BYTES serialised with length prefixes).
func dtypeTensors() []shmTensor {
	le := binary.LittleEndian
	var out []shmTensor
	for _, c := range []struct {
		dtype string
		size  int
	}{{"BOOL", 1}, {"UINT8", 1}, {"UINT16", 2}, {"UINT32", 4}, {"UINT64", 8}, {"INT8", 1}, {"INT16", 2},
		{"INT32", 4}, {"INT64", 8}, {"FP16", 2}, {"FP32", 4}, {"FP64", 8}, {"BF16", 2}} {
		raw := make([]byte, 3*c.size)
		for i := range raw {
			raw[i] = byte(i*7 + len(c.dtype))
		}
		switch c.dtype {
		case "BOOL":
			raw = []byte{1, 0, 1}
		case "FP16", "BF16":
			for i := range 3 {
				le.PutUint16(raw[2*i:], 0x3c00+uint16(i)) // finite values
			}
		case "FP32":
			for i := range 3 {
				le.PutUint32(raw[4*i:], math.Float32bits(float32(i)+0.5))
			}
		case "FP64":
			for i := range 3 {
				le.PutUint64(raw[8*i:], math.Float64bits(float64(i)-1.25))
			}
		}
		out = append(out, shmTensor{c.dtype, []int64{3}, raw})
	}
	var str []byte
	for _, s := range []string{"alpha", "", "γάμμα"} {
		str = le.AppendUint32(str, uint32(len(s)))
		str = append(str, s...)
	}
	return append(out, shmTensor{"BYTES", []int64{3}, str})
}

// name is the identity_all suffix of a dtype.
func (c shmTensor) name() string {
	if c.dtype == "BYTES" {
		return "STRING"
	}
	return c.dtype
}

// stubHighWater is the largest pool high water of any stub of model.
func stubHighWater(t *testing.T, s *server, model string) uint64 {
	t.Helper()
	var hw uint64
	for _, x := range allStubs(t, s, model) {
		hw = max(hw, x.PoolHighWater)
	}
	return hw
}

func TestSharedMemoryHTTP(t *testing.T) {
	ipctest.RequirePython(t)
	s := startServer(t, copyRepo(t, "identity_all", "identity_fp32"), "--allow-client-shm=true")
	register := func(name, key string, offset, size int) (int, string) {
		code, body := s.postJSON("/v2/systemsharedmemory/region/"+name+"/register", map[string]any{"key": key, "offset": offset, "byte_size": size})
		return code, string(body)
	}
	unregister := func(name string) {
		t.Helper()
		path := "/v2/systemsharedmemory/unregister"
		if name != "" {
			path = "/v2/systemsharedmemory/region/" + name + "/unregister"
		}
		if code, body := s.postJSON(path, nil); code != 200 {
			t.Fatalf("unregister %q: %d %s", name, code, body)
		}
	}

	t.Run("every dtype in and out through regions, at offsets", func(t *testing.T) {
		in := newClientRegion(t, "dtypes-in", 1<<16)
		out := newClientRegion(t, "dtypes-out", 1<<16)
		// Register only a window of each object: offsets are relative to it.
		if code, body := register("dt_in", in.key, 4096, 1<<15); code != 200 {
			t.Fatalf("register: %d %s", code, body)
		}
		if code, body := register("dt_out", out.key, 8192, 1<<15); code != 200 {
			t.Fatalf("register: %d %s", code, body)
		}
		t.Cleanup(func() { unregister("dt_in"); unregister("dt_out") })
		var inputs, outputs []map[string]any
		places := map[string]int{}
		off := 100 // not aligned on purpose
		for _, c := range dtypeTensors() {
			copy(in.mem[4096+off:], c.raw)
			inputs = append(inputs, map[string]any{"name": "INPUT_" + c.name(), "datatype": c.dtype, "shape": c.shape, "parameters": shmParams("dt_in", off, len(c.raw))})
			outputs = append(outputs, map[string]any{"name": "OUTPUT_" + c.name(), "parameters": shmParams("dt_out", off+8, len(c.raw))})
			places[c.name()] = off
			off += len(c.raw) + 13
		}
		code, body := s.postJSON("/v2/models/identity_all/infer", map[string]any{"inputs": inputs, "outputs": outputs})
		if code != 200 {
			t.Fatalf("infer: %d %s", code, body)
		}
		var resp struct {
			Outputs []struct {
				Name  string          `json:"name"`
				Shape []int64         `json:"shape"`
				Data  json.RawMessage `json:"data"`
			} `json:"outputs"`
		}
		if err := json.Unmarshal(body, &resp); err != nil {
			t.Fatal(err)
		}
		if len(resp.Outputs) != len(dtypeTensors()) {
			t.Fatalf("%d outputs, want %d: %s", len(resp.Outputs), len(dtypeTensors()), body)
		}
		for _, o := range resp.Outputs {
			if o.Data != nil {
				t.Errorf("output %s carries data in the response: %s", o.Name, o.Data)
			}
		}
		for _, c := range dtypeTensors() {
			got := out.mem[8192+places[c.name()]+8:][:len(c.raw)]
			if !bytes.Equal(got, c.raw) {
				t.Errorf("%s: region holds %x, want %x", c.dtype, got, c.raw)
			}
		}
	})

	t.Run("zero copy: late writes seen, large tensor stays out of the pool", func(t *testing.T) {
		const n = 16 << 20 // 16 MiB, far above the pool's 1 MiB default
		in := newClientRegion(t, "big-in", n)
		out := newClientRegion(t, "big-out", n)
		if code, body := register("big_in", in.key, 0, n); code != 200 {
			t.Fatalf("register: %d %s", code, body)
		}
		if code, body := register("big_out", out.key, 0, n); code != 200 {
			t.Fatalf("register: %d %s", code, body)
		}
		t.Cleanup(func() { unregister("big_in"); unregister("big_out") })
		for round := range 2 {
			// Written after registration: only a shared mapping can see it.
			for i := 0; i < n; i += 4 {
				binary.LittleEndian.PutUint32(in.mem[i:], math.Float32bits(float32(i/4+round)))
			}
			code, body := s.postJSON("/v2/models/identity_fp32/infer", map[string]any{
				"inputs":  []any{map[string]any{"name": "INPUT0", "datatype": "FP32", "shape": []int{n / 4}, "parameters": shmParams("big_in", 0, n)}},
				"outputs": []any{map[string]any{"name": "OUTPUT0", "parameters": shmParams("big_out", 0, n)}},
			})
			if code != 200 {
				t.Fatalf("infer: %d %s", code, body)
			}
			if !bytes.Equal(in.mem, out.mem) {
				t.Fatalf("round %d: output region differs from the input", round)
			}
		}
		if hw := stubHighWater(t, s, "identity_fp32"); hw >= n/8 {
			t.Fatalf("pool high water %d bytes: the tensor went through the pool", hw)
		}
	})

	t.Run("status and unregister", func(t *testing.T) {
		r := newClientRegion(t, "status", 8192)
		for _, name := range []string{"st_a", "st_b"} {
			if code, body := register(name, r.key, 0, 4096); code != 200 {
				t.Fatalf("register %s: %d %s", name, code, body)
			}
		}
		var all []map[string]any
		s.getJSON("/v2/systemsharedmemory/status", &all)
		names := map[string]bool{}
		for _, x := range all {
			names[x["name"].(string)] = true
		}
		if !names["st_a"] || !names["st_b"] {
			t.Fatalf("status: %v", all)
		}
		var one []map[string]any
		s.getJSON("/v2/systemsharedmemory/region/st_a/status", &one)
		if len(one) != 1 || one[0]["key"] != r.key || one[0]["byte_size"] != float64(4096) {
			t.Fatalf("status st_a: %v", one)
		}
		unregister("st_a")
		if code, _, body := s.do("GET", "/v2/systemsharedmemory/region/st_a/status", nil); code != 404 || !strings.Contains(string(body), "Unable to find system shared memory region: 'st_a'") {
			t.Fatalf("status after unregister: %d %s", code, body)
		}
		unregister("")
		s.getJSON("/v2/systemsharedmemory/status", &all)
		if len(all) != 0 {
			t.Fatalf("status after unregister all: %v", all)
		}
	})

	t.Run("errors", func(t *testing.T) {
		r := newClientRegion(t, "errors", 4096)
		if code, body := register("err", r.key, 0, 1024); code != 200 {
			t.Fatalf("register: %d %s", code, body)
		}
		t.Cleanup(func() { unregister("err") })
		regCases := []struct {
			name, region, key string
			offset, size      int
			code              int
			text              string
		}{
			{"duplicate name", "err", r.key, 0, 16, 400, "shared memory region 'err' already in manager"},
			{"missing key", "x", "/e2e-client-does-not-exist", 0, 16, 500, "Unable to open shared memory region: '/e2e-client-does-not-exist'"},
			// Keys that name no shm object are the client's error.
			{"key with a slash", "x", "/../etc/passwd", 0, 16, 400, "Unable to open shared memory region: '/../etc/passwd'"},
			{"key climbing out", "x", "/../../etc/passwd", 0, 16, 400, "Unable to open shared memory region: '/../../etc/passwd'"},
			{"proc file", "x", "/proc/self/mem", 0, 16, 400, "Unable to open shared memory region: '/proc/self/mem'"},
			{"dot dot", "x", "..", 0, 16, 400, "Unable to open shared memory region: '..'"},
			{"empty key", "x", "", 0, 16, 400, "cannot register shared memory region 'x' - invalid shm key ''"},
			{"key of slashes", "x", "///", 0, 16, 400, "cannot register shared memory region 'x' - invalid shm key '///'"},
			{"reserved prefix", "x", "triton_python_backend_shm_region_k", 0, 16, 400,
				"cannot register shared memory region 'x' with key 'triton_python_backend_shm_region_k' as the key contains the reserved prefix 'triton_python_backend_shm_region_'"},
			{"reserved prefix after slashes", "x", "///triton_python_backend_shm_region_k", 0, 16, 400,
				"cannot register shared memory region 'x' with key '///triton_python_backend_shm_region_k' as the key contains the reserved prefix 'triton_python_backend_shm_region_'"},
			{"past the object", "x", r.key, 4000, 200, 400, "failed to register shared memory region 'x': invalid args"},
		}
		for _, c := range regCases {
			code, body := register(c.region, c.key, c.offset, c.size)
			if code != c.code || !strings.Contains(body, c.text) {
				t.Errorf("%s: %d %s, want %d %q", c.name, code, body, c.code, c.text)
			}
		}
		for _, kind := range []string{"symlink", "fifo", "chardev"} {
			name, err := shmSpecial(t, kind)
			if err != nil {
				t.Logf("no %s case: %v", kind, err)
				continue
			}
			code, body := register("x", "/"+name, 0, 16)
			if want := "Unable to open shared memory region: '/" + name + "'"; code != 400 || !strings.Contains(body, want) {
				t.Errorf("%s: %d %s, want 400 %q", kind, code, body, want)
			}
		}
		inferCases := []struct {
			name   string
			in     map[string]any
			out    map[string]any
			code   int
			text   string
			shape  int
			region string
		}{
			{name: "unknown region", in: shmParams("nope", 0, 16), code: 404, text: "Unable to find shared memory region: 'nope'"},
			{name: "offset past the region", in: shmParams("err", 1024, 16), code: 400, text: "Invalid offset for shared memory region: 'err'"},
			{name: "offset plus size past the region", in: shmParams("err", 1020, 16), code: 400, text: "Invalid offset + byte size for shared memory region: 'err'"},
			{name: "offset plus size overflows", in: map[string]any{"shared_memory_region": "err", "shared_memory_offset": 16, "shared_memory_byte_size": uint64(math.MaxUint64)}, code: 400,
				text: "Integer overflow detected: byte_size (18446744073709551615) + offset (16) exceeds maximum value (18446744073709551615) for region 'err'"},
			{name: "byte size mismatch", in: shmParams("err", 0, 12), code: 400, text: "input byte size mismatch for input 'INPUT0' for model 'identity_fp32'. Expected 16, got 12"},
			{name: "output too small", in: shmParams("err", 0, 16), out: shmParams("err", 512, 8), code: 500,
				text: "shared memory size specified with the request for output 'OUTPUT0' (8 bytes) should be at least 16 bytes to hold the results"},
			{name: "output offset past the region", in: shmParams("err", 0, 16), out: shmParams("err", 2048, 8), code: 400, text: "Invalid offset for shared memory region: 'err'"},
		}
		for _, c := range inferCases {
			req := map[string]any{"inputs": []any{map[string]any{"name": "INPUT0", "datatype": "FP32", "shape": []int{4}, "parameters": c.in}}}
			if c.out != nil {
				req["outputs"] = []any{map[string]any{"name": "OUTPUT0", "parameters": c.out}}
			}
			code, body := s.postJSON("/v2/models/identity_fp32/infer", req)
			if code != c.code || !strings.Contains(string(body), c.text) {
				t.Errorf("%s: %d %s, want %d %q", c.name, code, body, c.code, c.text)
			}
		}
	})

	t.Run("object shrunk after registration", func(t *testing.T) {
		r := newClientRegion(t, "shrunk", 4096)
		if code, body := register("shrunk", r.key, 1024, 1024); code != 200 {
			t.Fatalf("register: %d %s", code, body)
		}
		t.Cleanup(func() { unregister("shrunk") })
		if err := unix.Truncate("/dev/shm"+r.key, 1500); err != nil {
			t.Fatal(err)
		}
		req := map[string]any{"inputs": []any{map[string]any{"name": "INPUT0", "datatype": "FP32", "shape": []int{4}, "parameters": shmParams("shrunk", 0, 16)}}}
		code, body := s.postJSON("/v2/models/identity_fp32/infer", req)
		if want := "shared memory region 'shrunk' is smaller than when it was registered"; code != 400 || !strings.Contains(string(body), want) {
			t.Fatalf("infer on a shrunk object: %d %s, want 400 %q", code, body, want)
		}
		// The request never reached the stub, which did not die.
		if _, restarts := stubOf(t, s, "identity_fp32", "identity_fp32_0_0"); restarts != 0 {
			t.Fatalf("identity_fp32 restarted %d times", restarts)
		}
	})
}

func TestSharedMemoryDisabledByDefault(t *testing.T) {
	ipctest.RequirePython(t)
	s := startServer(t, copyRepo(t, "identity_fp32"))
	const text = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
	r := newClientRegion(t, "disabled", 4096)
	for _, path := range []string{"/v2/systemsharedmemory/region/d/register", "/v2/systemsharedmemory/region/d/unregister", "/v2/systemsharedmemory/unregister"} {
		code, body := s.postJSON(path, map[string]any{"key": r.key, "byte_size": 16})
		if code != 501 || !strings.Contains(string(body), text) {
			t.Errorf("POST %s: %d %s", path, code, body)
		}
	}
	var all []map[string]any
	s.getJSON("/v2/systemsharedmemory/status", &all) // status still works
	if len(all) != 0 {
		t.Errorf("status: %v", all)
	}
	_, c := grpcClient(t, s)
	ctx := callCtx(t)
	_, err := c.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: "d", Key: r.key, ByteSize: 16})
	if st, _ := status.FromError(err); st.Code() != codes.Unimplemented || !strings.Contains(st.Message(), text) {
		t.Errorf("gRPC register: %v", err)
	}
}

func grpcShmParams(region string, offset, size int64) map[string]*pb.InferParameter {
	return map[string]*pb.InferParameter{
		"shared_memory_region":    {ParameterChoice: &pb.InferParameter_StringParam{StringParam: region}},
		"shared_memory_offset":    {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: offset}},
		"shared_memory_byte_size": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: size}},
	}
}

func TestSharedMemoryGRPC(t *testing.T) {
	ipctest.RequirePython(t)
	s := startServer(t, copyRepo(t, "identity_all"), "--allow-client-shm=true")
	_, c := grpcClient(t, s)
	ctx := callCtx(t)
	in := newClientRegion(t, "grpc-in", 1<<14)
	out := newClientRegion(t, "grpc-out", 1<<14)
	for name, key := range map[string]string{"g_in": in.key, "g_out": out.key} {
		if _, err := c.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: name, Key: key, Offset: 1024, ByteSize: 8192}); err != nil {
			t.Fatalf("register %s: %v", name, err)
		}
	}
	_, err := c.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: "g_in", Key: in.key, ByteSize: 16})
	if st, _ := status.FromError(err); st.Code() != codes.AlreadyExists || !strings.Contains(st.Message(), "shared memory region 'g_in' already in manager") {
		t.Fatalf("duplicate register: %v", err)
	}
	st, err := c.SystemSharedMemoryStatus(ctx, &pb.SystemSharedMemoryStatusRequest{Name: "g_in"})
	if err != nil || st.Regions["g_in"].GetKey() != in.key || st.Regions["g_in"].GetOffset() != 1024 || st.Regions["g_in"].GetByteSize() != 8192 {
		t.Fatalf("status: %v %v", st, err)
	}

	req := &pb.ModelInferRequest{ModelName: "identity_all"}
	places := map[string]int64{}
	off := int64(64)
	for _, tc := range dtypeTensors() {
		copy(in.mem[1024+off:], tc.raw)
		req.Inputs = append(req.Inputs, &pb.ModelInferRequest_InferInputTensor{Name: "INPUT_" + tc.name(), Datatype: tc.dtype, Shape: tc.shape,
			Parameters: grpcShmParams("g_in", off, int64(len(tc.raw)))})
		req.Outputs = append(req.Outputs, &pb.ModelInferRequest_InferRequestedOutputTensor{Name: "OUTPUT_" + tc.name(),
			Parameters: grpcShmParams("g_out", off*2, int64(len(tc.raw)))})
		places[tc.name()] = off
		off += int64(len(tc.raw)) + 5
	}
	resp, err := c.ModelInfer(ctx, req)
	if err != nil {
		t.Fatalf("infer: %v", err)
	}
	for i, raw := range resp.RawOutputContents { // one empty entry per shm output, as in Triton
		if len(raw) != 0 {
			t.Errorf("shared memory output %d came back with %d raw bytes", i, len(raw))
		}
	}
	for _, tc := range dtypeTensors() {
		if got := out.mem[1024+2*places[tc.name()]:][:len(tc.raw)]; !bytes.Equal(got, tc.raw) {
			t.Errorf("%s: region holds %x, want %x", tc.dtype, got, tc.raw)
		}
	}

	_, err = c.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "identity_all", Inputs: []*pb.ModelInferRequest_InferInputTensor{
		{Name: "INPUT_FP32", Datatype: "FP32", Shape: []int64{2}, Parameters: grpcShmParams("g_in", 8190, 8)}}})
	if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "Invalid offset + byte size for shared memory region: 'g_in'") {
		t.Errorf("out of range: %v", err)
	}

	if _, err := c.SystemSharedMemoryUnregister(ctx, &pb.SystemSharedMemoryUnregisterRequest{Name: "g_in"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SystemSharedMemoryStatus(ctx, &pb.SystemSharedMemoryStatusRequest{Name: "g_in"}); status.Code(err) != codes.NotFound {
		t.Fatalf("status after unregister: %v", err)
	}
	if _, err := c.SystemSharedMemoryUnregister(ctx, &pb.SystemSharedMemoryUnregisterRequest{}); err != nil {
		t.Fatal(err)
	}
	if st, err := c.SystemSharedMemoryStatus(ctx, &pb.SystemSharedMemoryStatusRequest{}); err != nil || len(st.Regions) != 0 {
		t.Fatalf("status after unregister all: %v %v", st, err)
	}
}

// shmSpecial makes /dev/shm/e2e-client-special-<kind>-<pid>, something that is not a
// shm object (a symlink to /etc/passwd, a FIFO, a character device), and
// removes it when the test ends.
func shmSpecial(t *testing.T, kind string) (string, error) {
	t.Helper()
	// Named like the test's client regions, which the harness's check for
	// leftover /dev/shm entries (of servers running alongside) ignores.
	name := fmt.Sprintf("e2e-client-special-%s-%d", kind, os.Getpid())
	path := "/dev/shm/" + name
	_ = os.Remove(path)
	var err error
	switch kind {
	case "symlink":
		err = os.Symlink("/etc/passwd", path)
	case "fifo":
		err = syscall.Mkfifo(path, 0o600)
	case "chardev":
		// /dev/null's numbers (1, 3); creating a device needs CAP_MKNOD.
		err = syscall.Mknod(path, syscall.S_IFCHR|0o600, 1<<8|3)
	}
	if err != nil {
		return "", err
	}
	t.Cleanup(func() { _ = os.Remove(path) })
	return name, nil
}

// TestSystemShmUnregisterInUse unregisters a region while a request reads
// it: as in Triton (L0_shared_memory), the region stays listed and usable
// until its last request ends, and is gone then without another call.
func TestSystemShmUnregisterInUse(t *testing.T) {
	ipctest.RequirePython(t)
	s := startServer(t, copyRepo(t, "e2e_echo"), "--allow-client-shm=true")
	r := newClientRegion(t, "inuse", 16)
	copy(r.mem, ipctest.FP32(1, 2, 3, 4))
	if code, body := s.postJSON("/v2/systemsharedmemory/region/inuse/register", map[string]any{"key": r.key, "offset": 0, "byte_size": 16}); code != 200 {
		t.Fatalf("register: %d %s", code, body)
	}
	req := map[string]any{
		"parameters": map[string]any{"sleep_ms": 1500},
		"inputs":     []any{map[string]any{"name": "INPUT0", "datatype": "FP32", "shape": []int{4}, "parameters": shmParams("inuse", 0, 16)}},
	}
	done := make(chan int, 1)
	go func() {
		code, _ := s.postJSON("/v2/models/e2e_echo/infer", req)
		done <- code
	}()
	waitInFlight(t, s, "e2e_echo", 1, 10*time.Second, "the request to be in execute")
	if code, body := s.postJSON("/v2/systemsharedmemory/unregister", nil); code != 200 {
		t.Fatalf("unregister all while in use: %d %s", code, body)
	}
	if code, _, body := s.do("GET", "/v2/systemsharedmemory/region/inuse/status", nil); code != 200 {
		t.Fatalf("a region in use must stay listed after unregister: %d %s", code, body)
	}
	select {
	case code := <-done:
		if code != 200 {
			t.Fatalf("request reading the unregistered region: %d", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("request did not finish")
	}
	if code, _, body := s.do("GET", "/v2/systemsharedmemory/region/inuse/status", nil); code != 404 {
		t.Fatalf("the region must be gone once its request ended: %d %s", code, body)
	}
}
