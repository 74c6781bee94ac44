package server

import (
	"context"
	"encoding/binary"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

// testBackend is a small but real Backend for handler tests: "add_sub"
// computes OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1 on FP32
// or INT32 tensors, "identity" returns INPUT0 as OUTPUT0 whatever its type,
// "batched" is identity with max_batch_size 8, and "decoupled" has the
// decoupled transaction policy. It keeps copies of the requests it saw and
// counts released responses.
type testBackend struct {
	live, ready atomic.Bool

	mu        sync.Mutex
	requests  []backendapi.InferRequest
	loads     []loadCall
	unloads   []unloadCall
	system    map[string]backendapi.SystemSharedMemoryRegion
	cuda      map[string]backendapi.CUDASharedMemoryRegion
	allowShm  bool
	stats     []backendapi.ModelStatistics
	stubs     []backendapi.ModelStubs
	custom    []backendapi.MetricFamily
	respond   func(*backendapi.InferResponse) // adjusts responses, when set
	responses atomic.Int64
	released  atomic.Int64
}

type loadCall struct {
	name string
	opts backendapi.LoadOptions
}

type unloadCall struct {
	name       string
	dependents bool
}

func newTestBackend() *testBackend {
	b := &testBackend{
		system:   map[string]backendapi.SystemSharedMemoryRegion{},
		cuda:     map[string]backendapi.CUDASharedMemoryRegion{},
		allowShm: true,
	}
	b.live.Store(true)
	b.ready.Store(true)
	return b
}

var _ backendapi.Backend = (*testBackend)(nil)

func tensorConfig(name string, dt inferencepb.DataType, dims ...int64) (*inferencepb.ModelInput, *inferencepb.ModelOutput) {
	return &inferencepb.ModelInput{Name: name, DataType: dt, Dims: dims},
		&inferencepb.ModelOutput{Name: name, DataType: dt, Dims: dims}
}

func (b *testBackend) config(name string) (*inferencepb.ModelConfig, error) {
	switch name {
	case "add_sub":
		in0, _ := tensorConfig("INPUT0", inferencepb.DataType_TYPE_FP32, 4)
		in1, _ := tensorConfig("INPUT1", inferencepb.DataType_TYPE_FP32, 4)
		_, out0 := tensorConfig("OUTPUT0", inferencepb.DataType_TYPE_FP32, 4)
		_, out1 := tensorConfig("OUTPUT1", inferencepb.DataType_TYPE_FP32, 4)
		return &inferencepb.ModelConfig{Name: name, Backend: "python",
			Input: []*inferencepb.ModelInput{in0, in1}, Output: []*inferencepb.ModelOutput{out0, out1}}, nil
	case "identity", "batched", "decoupled", "bytes_raw", "two_var":
		dt := inferencepb.DataType_TYPE_FP32
		dims := []int64{-1}
		switch name {
		case "bytes_raw":
			dt, dims = inferencepb.DataType_TYPE_STRING, []int64{1}
		case "two_var":
			dims = []int64{-1, -1}
		}
		in, _ := tensorConfig("INPUT0", dt, dims...)
		_, out := tensorConfig("OUTPUT0", dt, dims...)
		cfg := &inferencepb.ModelConfig{Name: name, Backend: "python",
			Input: []*inferencepb.ModelInput{in}, Output: []*inferencepb.ModelOutput{out}}
		if name == "batched" {
			cfg.MaxBatchSize = 8
		}
		if name == "decoupled" {
			cfg.ModelTransactionPolicy = &inferencepb.ModelTransactionPolicy{Decoupled: true}
		}
		return cfg, nil
	case "unloaded":
		return nil, backendapi.Errorf(backendapi.NotFound, "Request for unknown model: '%s' is not found", name)
	}
	return nil, backendapi.Errorf(backendapi.InvalidArg, "Request for unknown model: '%s' is not found", name)
}

func (b *testBackend) Live() bool  { return b.live.Load() }
func (b *testBackend) Ready() bool { return b.ready.Load() }

func (b *testBackend) ModelReady(_ context.Context, name string, version int64) error {
	if _, err := b.config(name); err != nil {
		return err
	}
	if version > 1 {
		return backendapi.Errorf(backendapi.NotFound, "Request for unknown model: '%s' version %d is not found", name, version)
	}
	return nil
}

func (b *testBackend) ModelMetadata(_ context.Context, name string, _ int64) (*backendapi.ModelMetadata, error) {
	cfg, err := b.config(name)
	if err != nil {
		return nil, err
	}
	md := &backendapi.ModelMetadata{Name: name, Versions: []string{"1"}, Platform: cfg.Backend}
	shape := func(dims []int64) []int64 {
		if cfg.MaxBatchSize > 0 {
			return append([]int64{-1}, dims...)
		}
		return slices.Clone(dims)
	}
	for _, in := range cfg.Input {
		md.Inputs = append(md.Inputs, backendapi.TensorMetadata{Name: in.Name, DataType: backendapi.DataType(in.DataType), Shape: shape(in.Dims)})
	}
	for _, out := range cfg.Output {
		md.Outputs = append(md.Outputs, backendapi.TensorMetadata{Name: out.Name, DataType: backendapi.DataType(out.DataType), Shape: shape(out.Dims)})
	}
	return md, nil
}

func (b *testBackend) ModelConfig(_ context.Context, name string, _ int64) (*inferencepb.ModelConfig, error) {
	return b.config(name)
}

func (b *testBackend) ModelStatistics(_ context.Context, name string, _ int64) ([]backendapi.ModelStatistics, error) {
	return ofModel(b, name, &b.stats, func(s *backendapi.ModelStatistics) string { return s.Name })
}

// ofModel returns the items of every model (name "") or of the named one,
// which must be configured; model says which model an item is of. items is
// read under b.mu.
func ofModel[T any](b *testBackend, name string, items *[]T, model func(*T) string) ([]T, error) {
	if name != "" {
		if _, err := b.config(name); err != nil {
			return nil, err
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []T
	for i := range *items {
		if it := &(*items)[i]; name == "" || model(it) == name {
			out = append(out, *it)
		}
	}
	return out, nil
}

// cloneRequest deep-copies a request: the server reuses its buffers.
func cloneRequest(r *backendapi.InferRequest) backendapi.InferRequest {
	c := *r
	c.Inputs = make([]backendapi.InputTensor, len(r.Inputs))
	for i, in := range r.Inputs {
		in.Shape = slices.Clone(in.Shape)
		if in.Data != nil {
			in.Data = slices.Clone(in.Data)
		}
		if in.SharedMemory != nil {
			ref := *in.SharedMemory
			in.SharedMemory = &ref
		}
		c.Inputs[i] = in
	}
	c.Outputs = slices.Clone(r.Outputs)
	if r.Parameters != nil {
		c.Parameters = make(map[string]any, len(r.Parameters))
		for k, v := range r.Parameters {
			c.Parameters[k] = v
		}
	}
	return c
}

func (b *testBackend) lastRequest() backendapi.InferRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.requests) == 0 {
		return backendapi.InferRequest{}
	}
	return b.requests[len(b.requests)-1]
}

func (b *testBackend) Infer(_ context.Context, req *backendapi.InferRequest) (*backendapi.InferResponse, error) {
	cfg, err := b.config(req.ModelName)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.requests = append(b.requests, cloneRequest(req))
	respond := b.respond
	b.mu.Unlock()
	input := func(name string) (*backendapi.InputTensor, error) {
		for i := range req.Inputs {
			if req.Inputs[i].Name == name {
				return &req.Inputs[i], nil
			}
		}
		return nil, backendapi.Errorf(backendapi.InvalidArg, "expected %d inputs but got %d inputs for model '%s'", len(cfg.Input), len(req.Inputs), req.ModelName)
	}
	resp := &backendapi.InferResponse{ModelName: req.ModelName, ModelVersion: 1, ID: req.ID}
	switch req.ModelName {
	case "add_sub":
		a, err := input("INPUT0")
		if err != nil {
			return nil, err
		}
		c, err := input("INPUT1")
		if err != nil {
			return nil, err
		}
		if a.DataType != c.DataType || len(a.Data) != len(c.Data) || len(a.Data)%4 != 0 {
			return nil, backendapi.Errorf(backendapi.InvalidArg, "add_sub needs two inputs of one type and size")
		}
		sum, diff := make([]byte, len(a.Data)), make([]byte, len(a.Data))
		for i := 0; i < len(a.Data); i += 4 {
			x, y := binary.LittleEndian.Uint32(a.Data[i:]), binary.LittleEndian.Uint32(c.Data[i:])
			switch a.DataType {
			case backendapi.TypeFP32:
				fx, fy := math.Float32frombits(x), math.Float32frombits(y)
				binary.LittleEndian.PutUint32(sum[i:], math.Float32bits(fx+fy))
				binary.LittleEndian.PutUint32(diff[i:], math.Float32bits(fx-fy))
			case backendapi.TypeInt32:
				binary.LittleEndian.PutUint32(sum[i:], uint32(int32(x)+int32(y)))
				binary.LittleEndian.PutUint32(diff[i:], uint32(int32(x)-int32(y)))
			default:
				return nil, backendapi.Errorf(backendapi.InvalidArg, "add_sub supports FP32 and INT32")
			}
		}
		resp.Outputs = []backendapi.OutputTensor{
			{Name: "OUTPUT0", DataType: a.DataType, Shape: slices.Clone(a.Shape), Data: sum},
			{Name: "OUTPUT1", DataType: a.DataType, Shape: slices.Clone(a.Shape), Data: diff},
		}
	default:
		in, err := input("INPUT0")
		if err != nil {
			return nil, err
		}
		resp.Outputs = []backendapi.OutputTensor{{Name: "OUTPUT0", DataType: in.DataType, Shape: slices.Clone(in.Shape), Data: slices.Clone(in.Data)}}
	}
	if len(req.Outputs) > 0 {
		var kept []backendapi.OutputTensor
		for _, o := range resp.Outputs {
			for _, want := range req.Outputs {
				if want.Name == o.Name {
					if want.SharedMemory != nil {
						ref := *want.SharedMemory
						o.SharedMemory, o.Data = &ref, nil
					}
					kept = append(kept, o)
				}
			}
		}
		resp.Outputs = kept
	}
	if len(req.Parameters) > 0 {
		resp.Parameters = map[string]any{}
		for k, v := range req.Parameters {
			resp.Parameters[k] = v
		}
	}
	if respond != nil {
		respond(resp)
	}
	b.responses.Add(1)
	resp.SetRelease(func() { b.released.Add(1) })
	return resp, nil
}

// InferStream answers like Infer, with one final response (the generate
// extension uses it for every model).
func (b *testBackend) InferStream(ctx context.Context, req *backendapi.InferRequest, send func(*backendapi.InferResponse, error, bool)) error {
	resp, err := b.Infer(ctx, req)
	if err != nil {
		return err
	}
	send(resp, nil, true)
	resp.Release()
	return nil
}

func (b *testBackend) RepositoryIndex(_ context.Context, readyOnly bool) ([]backendapi.ModelIndexEntry, error) {
	all := []backendapi.ModelIndexEntry{
		{Name: "add_sub", Version: "1", State: "READY"},
		{Name: "broken", Version: "1", State: "UNAVAILABLE", Reason: "load failed"},
		{Name: "never"},
	}
	if !readyOnly {
		return all, nil
	}
	return all[:1], nil
}

func (b *testBackend) LoadModel(_ context.Context, name string, opts backendapi.LoadOptions) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.loads = append(b.loads, loadCall{name, opts})
	if name == "broken" {
		return backendapi.Errorf(backendapi.InvalidArg, "failed to load 'broken': no model.py")
	}
	return nil
}

func (b *testBackend) UnloadModel(_ context.Context, name string, dependents bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.unloads = append(b.unloads, unloadCall{name, dependents})
	return nil
}

func (b *testBackend) CustomMetrics(context.Context) ([]backendapi.MetricFamily, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.custom, nil
}

func (b *testBackend) Stubs(_ context.Context, model string) ([]backendapi.ModelStubs, error) {
	return ofModel(b, model, &b.stubs, func(m *backendapi.ModelStubs) string { return m.Model })
}

const msgShmDisabled = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."

func (b *testBackend) RegisterSystemSharedMemory(_ context.Context, name, key string, offset, byteSize uint64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.allowShm {
		return backendapi.Errorf(backendapi.Unsupported, msgShmDisabled)
	}
	if _, ok := b.system[name]; ok {
		return backendapi.Errorf(backendapi.AlreadyExists, "shared memory region '%s' already in manager", name)
	}
	b.system[name] = backendapi.SystemSharedMemoryRegion{Name: name, Key: key, Offset: offset, ByteSize: byteSize}
	return nil
}

func (b *testBackend) UnregisterSystemSharedMemory(_ context.Context, name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.allowShm {
		return backendapi.Errorf(backendapi.Unsupported, msgShmDisabled)
	}
	if name == "" {
		clear(b.system)
	} else {
		delete(b.system, name)
	}
	return nil
}

func (b *testBackend) SystemSharedMemoryStatus(_ context.Context, name string) ([]backendapi.SystemSharedMemoryRegion, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if name != "" {
		r, ok := b.system[name]
		if !ok {
			return nil, backendapi.Errorf(backendapi.NotFound, "Unable to find system shared memory region: '%s'", name)
		}
		return []backendapi.SystemSharedMemoryRegion{r}, nil
	}
	var out []backendapi.SystemSharedMemoryRegion
	for _, r := range b.system {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (b *testBackend) RegisterCUDASharedMemory(_ context.Context, name string, handle []byte, device int64, byteSize uint64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(handle) != cudaIPCHandleSize {
		return backendapi.Errorf(backendapi.Internal, "bad handle size %d", len(handle))
	}
	b.cuda[name] = backendapi.CUDASharedMemoryRegion{Name: name, DeviceID: device, ByteSize: byteSize}
	return nil
}

func (b *testBackend) UnregisterCUDASharedMemory(_ context.Context, name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.cuda, name)
	return nil
}

func (b *testBackend) CUDASharedMemoryStatus(_ context.Context, name string) ([]backendapi.CUDASharedMemoryRegion, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []backendapi.CUDASharedMemoryRegion
	for _, r := range b.cuda {
		if name == "" || r.Name == name {
			out = append(out, r)
		}
	}
	return out, nil
}

// sampleStats and sampleStubs are fixed figures for the statistics, stubs
// and metrics tests.
func sampleStats() []backendapi.ModelStatistics {
	return []backendapi.ModelStatistics{{
		Name: "add_sub", Version: "1",
		LastInference:  time.UnixMilli(1700000000123),
		InferenceCount: 12, ExecutionCount: 7,
		Inference: backendapi.InferStats{
			Success:       backendapi.Duration{Count: 10, Total: 5 * time.Millisecond},
			Fail:          backendapi.Duration{Count: 2, Total: 1 * time.Millisecond},
			FailReasons:   [backendapi.NumFailureReasons]uint64{backendapi.FailureBackend: 1, backendapi.FailureRejected: 1},
			Queue:         backendapi.Duration{Count: 10, Total: 300 * time.Microsecond},
			ComputeInput:  backendapi.Duration{Count: 10, Total: 100 * time.Microsecond},
			ComputeInfer:  backendapi.Duration{Count: 10, Total: 4 * time.Millisecond},
			ComputeOutput: backendapi.Duration{Count: 10, Total: 200 * time.Microsecond},
		},
		Batches: []backendapi.BatchStats{
			{BatchSize: 2, ComputeInfer: backendapi.Duration{Count: 3, Total: time.Millisecond}},
			{BatchSize: 1, ComputeInfer: backendapi.Duration{Count: 4, Total: 3 * time.Millisecond}},
		},
	}}
}

func sampleStubs() []backendapi.ModelStubs {
	return []backendapi.ModelStubs{{
		Model: "add_sub", Version: "1", State: "READY",
		Stubs: []backendapi.StubStatus{{
			Instance: "add_sub_0_0", Kind: "python", PID: 4242, State: backendapi.StubReady,
			Restarts: 3, LastExitCause: "killed by signal 9", HeartbeatAge: 250 * time.Millisecond,
			InFlight: 1, PoolInUse: 1 << 20, PoolCapacity: 64 << 20, PoolHighWater: 2 << 20,
			Uptime: 90 * time.Second, Executions: 77, Requests: 12,
			RSSBytes: 50 << 20, CPUSeconds: 1.5, OpenFDs: 9, Threads: 3,
			Recycles: 2, LastRecycleCause: "recycled: rss 2.1 GiB > MAX_RSS_MB 2048", MemoryLimit: "4096 MiB (rlimit-data)",
			LoadSteps: &backendapi.LoadSteps{EnvironmentS: 0.5, InterpreterStartS: 0.25, ImportsS: 1, InitializeS: 2},
		}},
		History: []backendapi.Sample{{UnixMS: 1000, Requests: 4, LatencyUS: 250, RSS: map[string]uint64{"add_sub_0_0": 50 << 20}}},
	}}
}

func i32(vs ...int32) []byte {
	b := make([]byte, 0, 4*len(vs))
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	return b
}

func bytesTensor(elems ...string) []byte {
	var b []byte
	for _, e := range elems {
		b = appendBytesElement(b, []byte(e))
	}
	return b
}
