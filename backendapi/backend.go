package backendapi

import (
	"context"
	"time"

	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

// Backend is everything a front end (HTTP, gRPC, metrics, status page)
// needs from the server core. The supervisor implements it; package server
// depends on nothing else, so a front end never sees processes, rings or
// pools.
//
// Model versions are int64; 0 means "let the version policy choose" (the
// latest ready version), as an empty version does in the KServe URLs.
// Every method returns errors built with Errorf (or wrapping one), whose
// Code the front end maps to a status.
type Backend interface {
	// Live reports whether the server is up and not shutting down.
	Live() bool
	// Ready reports server readiness (with strict readiness: every loaded
	// model is ready).
	Ready() bool

	// ModelReady returns nil when the model version can serve requests.
	ModelReady(ctx context.Context, name string, version int64) error
	ModelMetadata(ctx context.Context, name string, version int64) (*ModelMetadata, error)
	ModelConfig(ctx context.Context, name string, version int64) (*inferencepb.ModelConfig, error)
	// ModelStatistics returns statistics for one model (all its ready
	// versions when version is 0), or for every model when name is "".
	ModelStatistics(ctx context.Context, name string, version int64) ([]ModelStatistics, error)

	// Infer runs a request on a non-decoupled model and returns its one
	// response. The caller must call Release on the response when it has
	// finished reading the output bytes.
	Infer(ctx context.Context, req *InferRequest) (*InferResponse, error)
	// InferStream runs a request on any model and calls send for each
	// response in order, the last one with final set. Errors of the
	// request itself (bad input, unknown model) are returned; errors a
	// model reports for a response arrive through send. InferStream
	// returns once the request has completed. send must not block for
	// long; the response passed to it is valid only during the call.
	InferStream(ctx context.Context, req *InferRequest, send func(resp *InferResponse, err error, final bool)) error

	// RepositoryIndex lists the models of every repository.
	RepositoryIndex(ctx context.Context, readyOnly bool) ([]ModelIndexEntry, error)
	// LoadModel loads or reloads a model (explicit model-control mode).
	LoadModel(ctx context.Context, name string, opts LoadOptions) error
	// UnloadModel unloads a model (explicit model-control mode).
	UnloadModel(ctx context.Context, name string, unloadDependents bool) error

	// Stubs returns the supervisor's view of every stub of one model, or of
	// every model when model is "".
	Stubs(ctx context.Context, model string) ([]ModelStubs, error)
	// CustomMetrics returns the metric families models define
	// (pb_utils.MetricFamily), with the series of all their stubs merged.
	// Stubs that do not answer before ctx ends are left out.
	CustomMetrics(ctx context.Context) ([]MetricFamily, error)

	// Client shared memory (system and CUDA); see the shared memory
	// extension. Register and unregister fail with Unsupported when the
	// server was started without --allow-client-shm.
	RegisterSystemSharedMemory(ctx context.Context, name, key string, offset, byteSize uint64) error
	UnregisterSystemSharedMemory(ctx context.Context, name string) error
	SystemSharedMemoryStatus(ctx context.Context, name string) ([]SystemSharedMemoryRegion, error)
	RegisterCUDASharedMemory(ctx context.Context, name string, rawHandle []byte, deviceID int64, byteSize uint64) error
	UnregisterCUDASharedMemory(ctx context.Context, name string) error
	CUDASharedMemoryStatus(ctx context.Context, name string) ([]CUDASharedMemoryRegion, error)
}

// Request flags, as in TRITONSERVER_RequestFlag.
const (
	FlagSequenceStart uint32 = 1
	FlagSequenceEnd   uint32 = 2
)

// CorrelationID is a sequence id: a uint64 or a string. The zero value
// means "not part of a sequence".
type CorrelationID struct {
	Uint   uint64
	String string
	IsText bool // String is the id (even when empty)
}

// IsZero reports whether the id names no sequence (0 or "").
func (c CorrelationID) IsZero() bool {
	if c.IsText {
		return c.String == ""
	}
	return c.Uint == 0
}

// InferRequest is one inference request as a front end parsed it. Input
// data is always in binary tensor form (BYTES as 4-byte little-endian
// length prefixes), whatever the wire carried.
type InferRequest struct {
	ModelName    string
	ModelVersion int64
	ID           string
	// Parameters are the request's custom parameters (string, int64,
	// uint64, float64 or bool values); reserved keys are already removed.
	Parameters    map[string]any
	CorrelationID CorrelationID
	Flags         uint32
	Priority      uint64
	// Timeout is the queue timeout (schedule policy); 0 means none.
	Timeout time.Duration
	Inputs  []InputTensor
	// Outputs lists the requested outputs; empty means all of them.
	Outputs []RequestedOutput
	// Trace, when set, receives the timestamps of a traced request.
	Trace *Trace
	// Queued, when set, is called once the request has its place in the
	// model's queue (an ensemble: once it starts), so that a front end
	// keeping a client's order (one gRPC stream) can hand over the next
	// request then and its batch keeps arrival order. It is not called
	// for a request refused before that; InferStream's return says so.
	Queued func()
	// InputBuffer, when set, is the backend's buffer (InputBuffers) that
	// some inputs' Data lie in: the backend uses those bytes in place.
	InputBuffer *InputBuffer
}

// InputTensor is one request input: bytes in memory, or a slice of a
// registered shared-memory region.
type InputTensor struct {
	Name         string
	DataType     DataType
	Shape        []int64
	Data         []byte
	SharedMemory *SharedMemoryRef
}

// RequestedOutput names an output the client wants, optionally written into
// a registered shared-memory region.
type RequestedOutput struct {
	Name           string
	Classification uint32
	SharedMemory   *SharedMemoryRef
}

// SharedMemoryRef is a tensor's place in a registered region: the
// shared_memory_region, shared_memory_offset and shared_memory_byte_size
// parameters of the shared memory extension.
type SharedMemoryRef struct {
	Region   string
	Offset   uint64
	ByteSize uint64
}

// InferResponse is one response of a model.
type InferResponse struct {
	ModelName    string
	ModelVersion int64
	ID           string
	Parameters   map[string]any
	Outputs      []OutputTensor
	release      func()
}

// OutputTensor is one output. Data aliases stub memory until the response is
// released; it is nil when the output was written into shared memory.
type OutputTensor struct {
	Name         string
	DataType     DataType
	Shape        []int64
	Data         []byte
	SharedMemory *SharedMemoryRef
}

// SetRelease sets the function that Release calls (used by the backend).
func (r *InferResponse) SetRelease(f func()) { r.release = f }

// TakeRelease returns the function Release would call and leaves Release
// a no-op: for a caller that hands Data on to be written after it returns,
// and the release with it. Nil if there is nothing to release.
func (r *InferResponse) TakeRelease() func() {
	if r == nil {
		return nil
	}
	f := r.release
	r.release = nil
	return f
}

// Release returns the response's memory to its owner. It is idempotent.
func (r *InferResponse) Release() {
	if r == nil || r.release == nil {
		return
	}
	f := r.release
	r.release = nil
	f()
}

// TensorMetadata describes one model input or output.
type TensorMetadata struct {
	Name     string
	DataType DataType
	Shape    []int64 // -1 for variable dims, a leading -1 for the batch dim
}

// ModelMetadata is the model metadata of the KServe v2 API.
type ModelMetadata struct {
	Name     string
	Versions []string
	Platform string
	Inputs   []TensorMetadata
	Outputs  []TensorMetadata
}

// ModelIndexEntry is one row of the repository index.
type ModelIndexEntry struct {
	Name    string
	Version string     // empty for a model that was never loaded
	State   ModelState // "" for a model that was never loaded
	Reason  string
}

// LoadOptions carries the optional parameters of a load request.
type LoadOptions struct {
	// ConfigJSON, when set, replaces config.pbtxt (model config JSON).
	ConfigJSON string
	// Files maps "file:<version>/<path>" names to file contents; it needs
	// ConfigJSON.
	Files map[string][]byte
}

// Duration is a count and total time, the statistics extension's
// $duration_stat.
type Duration struct {
	Count uint64
	Total time.Duration
}

// Observe adds one sample.
func (d *Duration) Observe(t time.Duration) { d.Count++; d.Total += t }

// InferStats are the inference statistics of one model version.
type InferStats struct {
	Success, Fail, Queue, ComputeInput, ComputeInfer, ComputeOutput, CacheHit, CacheMiss Duration
	// FailReasons counts the failed requests by Triton's failure reason
	// (the reason label of nv_inference_request_failure); the counts add
	// up to Fail.Count.
	FailReasons [NumFailureReasons]uint64
}

// FailureReason is why a request failed, as Triton's metrics tell it.
type FailureReason int

// The failure reasons, in the order of InferStats.FailReasons.
const (
	// FailureRejected: refused by the scheduler (queue full, queue timeout).
	FailureRejected FailureReason = iota
	// FailureCanceled: cancelled by the client.
	FailureCanceled
	// FailureBackend: failed in the model (an error response, a stub death).
	FailureBackend
	// FailureOther: anything else.
	FailureOther
	NumFailureReasons
)

// String is the reason's label value: REJECTED, CANCELED, BACKEND, OTHER.
func (r FailureReason) String() string {
	switch r {
	case FailureRejected:
		return "REJECTED"
	case FailureCanceled:
		return "CANCELED"
	case FailureBackend:
		return "BACKEND"
	}
	return "OTHER"
}

// BatchStats are the statistics of executions of one batch size.
type BatchStats struct {
	BatchSize                                 uint64
	ComputeInput, ComputeInfer, ComputeOutput Duration
}

// ModelStatistics are the statistics extension's figures for one model
// version.
type ModelStatistics struct {
	Name           string
	Version        string
	LastInference  time.Time
	InferenceCount uint64
	ExecutionCount uint64
	Inference      InferStats
	Batches        []BatchStats
}

// ModelState is where a model version is in its life, in the names of
// Triton's repository index. The backend derives it once, from the model's
// load state and its instances' stubs, so that the repository index,
// readiness, metrics and the stub status agree.
type ModelState string

// The states of a model version.
const (
	// ModelNotLoaded is a model found in a repository and never loaded:
	// the index shows no state, the stub status shows ModelUnknown.
	ModelNotLoaded   ModelState = ""
	ModelUnknown     ModelState = "UNKNOWN"
	ModelLoading     ModelState = "LOADING"
	ModelReady       ModelState = "READY"
	ModelUnavailable ModelState = "UNAVAILABLE"
	ModelUnloading   ModelState = "UNLOADING"
)

// StubState is where a stub is in its life.
type StubState string

// The states of a stub.
const (
	StubStarting   StubState = "starting"
	StubReady      StubState = "ready"
	StubBusy       StubState = "busy"
	StubUnhealthy  StubState = "unhealthy"
	StubRestarting StubState = "restarting"
	StubStopped    StubState = "stopped"
)

// StubStatus is the supervisor's view of one stub process (one model
// instance).
type StubStatus struct {
	Instance      string    `json:"instance"`
	Kind          string    `json:"kind"` // "python" or "go"
	PID           int       `json:"pid"`
	State         StubState `json:"state"`
	Restarts      int       `json:"restarts"`
	LastExitCause string    `json:"last_exit_cause,omitempty"`
	// HeartbeatAge is the time since the stub last proved it is alive.
	HeartbeatAge  time.Duration `json:"-"`
	InFlight      int           `json:"in_flight"`
	RingDepthIn   int           `json:"ring_depth_in"`  // bytes queued for the stub
	RingDepthOut  int           `json:"ring_depth_out"` // bytes queued from the stub
	PoolInUse     uint64        `json:"pool_bytes_in_use"`
	PoolCapacity  uint64        `json:"pool_bytes_capacity"`
	PoolHighWater uint64        `json:"pool_bytes_high_water"`
	Uptime        time.Duration `json:"-"`
	Executions    uint64        `json:"executions"`
	// Requests counts the requests the current stub process has served:
	// its age in requests, as Uptime is its age in time.
	Requests uint64 `json:"requests"`
	// The stub process's cost as /proc shows it; zero while no stub runs.
	RSSBytes   uint64  `json:"rss_bytes"`
	CPUSeconds float64 `json:"cpu_seconds"`
	OpenFDs    int     `json:"open_fds"`
	Threads    int     `json:"threads"`
	// Recycles counts the stubs replaced for crossing a limit
	// (MAX_RSS_MB, MAX_REQUESTS_PER_STUB, MAX_STUB_AGE_S), and
	// LastRecycleCause says why the last one was.
	Recycles         int    `json:"recycles"`
	LastRecycleCause string `json:"last_recycle_cause,omitempty"`
	// MemoryLimit is the hard limit and how it is enforced, "512 MiB
	// (cgroup-v2)"; "" for none.
	MemoryLimit string `json:"memory_limit,omitempty"`
	// LoadSteps is how long the current stub's load took, step by step.
	LoadSteps *LoadSteps `json:"load_steps,omitempty"`
	// RateLimitWaiting: an execute of the instance waits for the rate
	// limiter's resources now; RateLimitWaitS is how long its executes
	// waited for them in all. Both are absent for an instance the rate
	// limiter does not limit.
	RateLimitWaiting bool    `json:"rate_limit_waiting,omitempty"`
	RateLimitWaitS   float64 `json:"rate_limit_wait_s,omitempty"`
}

// LoadSteps times the steps of loading a model into a stub, in seconds:
// preparing its environment (unpacking EXECUTION_ENV_PATH, checking the
// interpreter; done once per load), starting the interpreter (spawn to
// handshake), importing model.py, initialize(), and warmup (0: the model
// has none).
type LoadSteps struct {
	EnvironmentS      float64 `json:"environment_s"`
	InterpreterStartS float64 `json:"interpreter_start_s"`
	ImportsS          float64 `json:"imports_s"`
	InitializeS       float64 `json:"initialize_s"`
	WarmupS           float64 `json:"warmup_s"`
}

// MetricKind is the kind of a custom metric family.
type MetricKind int

// The kinds of pb_utils.MetricFamily, with its values.
const (
	MetricCounter   MetricKind = 0
	MetricGauge     MetricKind = 1
	MetricHistogram MetricKind = 2
)

// MetricFamily is a custom metric family a model defines.
type MetricFamily struct {
	Name, Description string
	Kind              MetricKind
	Metrics           []Metric
}

// Metric is one labelled series of a MetricFamily. Counters and gauges
// carry Value; histograms carry Buckets (upper bounds, ascending), Counts
// (cumulative, one per bucket), Sum and Count.
type Metric struct {
	Labels  map[string]string
	Value   float64
	Buckets []float64
	Counts  []uint64
	Sum     float64
	Count   uint64
}

// ModelStubs groups the stubs of one model version.
type ModelStubs struct {
	Model   string       `json:"model"`
	Version string       `json:"version"`
	State   ModelState   `json:"state"`
	Reason  string       `json:"reason,omitempty"`
	Stubs   []StubStatus `json:"stubs"`
	// Steps are an ensemble's steps (it has no stubs of its own).
	Steps []EnsembleStep `json:"steps,omitempty"`
	// History is the last minutes of the version's figures, oldest
	// first, one sample a second.
	History []Sample `json:"history,omitempty"`
}

// Sample is one point of a model version's history: the memory of each
// stub and the latency of the requests that finished since the sample
// before.
type Sample struct {
	UnixMS int64 `json:"t"`
	// Requests finished since the previous sample, and their mean latency
	// (0 when none finished).
	Requests  uint64  `json:"requests"`
	LatencyUS float64 `json:"latency_us"`
	// RSS maps each instance that has a live stub to its resident set
	// size in bytes.
	RSS map[string]uint64 `json:"rss"`
}

// EnsembleStep is one step of an ensemble as the status page shows it.
type EnsembleStep struct {
	Model   string   `json:"model"`
	Version string   `json:"version"`           // "latest" or a number
	Inputs  []string `json:"inputs,omitempty"`  // "ensemble tensor -> model input"
	Outputs []string `json:"outputs,omitempty"` // "model output -> ensemble tensor"
}

// SystemSharedMemoryRegion is the status of one registered system region.
type SystemSharedMemoryRegion struct {
	Name     string
	Key      string
	Offset   uint64
	ByteSize uint64
}

// CUDASharedMemoryRegion is the status of one registered CUDA region.
type CUDASharedMemoryRegion struct {
	Name     string
	DeviceID int64
	ByteSize uint64
}
