package ipc

// ProtocolVersion is written in the region header by the supervisor and
// announced by the stub in Hello; a mismatch fails the handshake.
const ProtocolVersion = 1

// Kind is the first element of every message array.
type Kind uint8

// Supervisor -> stub messages.
//
//	Initialize   [1, id, args {str: str}, options {str: any}]   -> Result(value nil)
//	Execute      [2, batch_id, [Request...]]                     -> Response*, ExecuteDone
//	Finalize     [3, id]                                         -> Result(value nil)
//	Release      [4, 0, [offset...]]   arena 1 blocks the supervisor no longer reads
//	Cancel       [5, request_handle]   the client gave up on this request
//	IsReady      [6, id]                                         -> Result(value bool)
//	AutoComplete [7, id, options {str: any}, config_json str]    -> Result(value config_json str)
//	InferResult  [8, id, Response]     a response to the stub's InferExec (BLS); its
//	             outputs are in arena 0 and the stub returns them with Free
//	MapRegion    [9, 0, region_id, region_offset, byte_size]  map the client
//	             shared-memory region whose fd was just sent with SCM_RIGHTS
//	             on the lifeline socket (fd 4); tensors with loc LocClient
//	             name it by region_id
//	             [9, 0, region_id, 0, byte_size, cuda_handle bin, device_id int]
//	             a CUDA region instead: no fd is sent; the stub opens the
//	             64-byte cudaIpcMemHandle_t on the device when a tensor
//	             first uses it; tensors with loc LocCUDA name it by region_id
//	UnmapRegion  [10, 0, region_id]    no request uses the region any more
//	CollectMetrics [11, id]            -> Result(value [family...]) the model's
//	             custom metrics (pb_utils.MetricFamily), read at a scrape:
//	             family = [name, description, kind (0 counter, 1 gauge,
//	             2 histogram), [metric...]], metric = [labels {str: str},
//	             value, buckets [float] or nil, cumulative counts [int] or nil
//	             (one per bucket, then +Inf), sum, count]. A reader thread
//	             answers, not the model's: it comes even during a long execute.
//	ControlResult [12, id, Error|nil, value]  the answer to the stub's
//	             ModelControl with the same id
//
// Stub -> supervisor messages.
//
//	Hello        [64, 0, version int, pid int, info {str: str}]  first frame after attach
//	Result       [65, id, Error|nil, value]
//	Response     [66, 0, Response]   one response sent through a response sender
//	ExecuteDone  [67, batch_id, Error|nil, [Response...]]
//	             [67, batch_id, Error|nil, [Response...], [handle...]]
//	             execute returned; carries the responses it returned (none for
//	             decoupled models). An error fails every request of the batch
//	             that has not had its final response. The handles, when
//	             present, are requests the model released with RESCHEDULE:
//	             they live on and are sent again in a later Execute, with a
//	             new handle.
//	             [67, batch_id, Error|nil, [Response...], [handle...], [handle...]]
//	             the sixth element, when present, lists requests of a model
//	             that is not decoupled which execute left to a response
//	             sender still open: their response comes later as Response.
//	Log          [68, 0, level str, message str, file str, line int]
//	InferExec    [69, id, model_name str, model_version int, Request, decoupled bool]
//	             a BLS request from inside execute; inputs in arena 1 (the
//	             supervisor sends Release for them once read); answered by
//	             InferResult messages with the same id, the last one FlagFinal
//	Free         [70, 0, [offset...]]  arena 0 blocks the stub no longer reads
//	InferCancel  [71, id]  the model cancelled its BLS request id
//	             (ResponseIterator.cancel()): the supervisor cancels the
//	             callee's request; InferResult messages still end with FlagFinal
//	ModelControl [72, id, op str, model_name str, options {str: any}]
//	             the model loading API of pb_utils: op "load" (options
//	             "config" str, "files" {str: bin}), "unload" (options
//	             "unload_dependents" bool) or "is_ready" (options "version"
//	             str); answered by ControlResult (value: bool for is_ready)
//
// Memory ownership: each side allocates what it sends in its own arena and
// only the owner frees. The supervisor frees a request's inputs (arena 0)
// once it has both the batch's ExecuteDone and the request's final response.
// The stub frees a response's outputs (arena 1) when the supervisor sends
// Release for them.
//
// The Result of Initialize is {"is_ready": true} when the model defines
// its own readiness check (is_ready(), stub.ReadyChecker), which
// IsReady then runs; nil otherwise.
//
// Initialize options: "model_file" (path of model.py or the Go binary),
// "decoupled" (bool), "force_cpu_only_input_tensors" (bool). AutoComplete
// options: "model_file". Unknown options are ignored.
const (
	KindInitialize     Kind = 1
	KindExecute        Kind = 2
	KindFinalize       Kind = 3
	KindRelease        Kind = 4
	KindCancel         Kind = 5
	KindIsReady        Kind = 6
	KindAutoComplete   Kind = 7
	KindInferResult    Kind = 8
	KindMapRegion      Kind = 9
	KindUnmapRegion    Kind = 10
	KindCollectMetrics Kind = 11
	KindControlResult  Kind = 12

	KindHello       Kind = 64
	KindResult      Kind = 65
	KindResponse    Kind = 66
	KindExecuteDone Kind = 67
	KindLog         Kind = 68
	KindInferExec   Kind = 69
	KindFree        Kind = 70
	KindInferCancel Kind = 71
	KindModelCtl    Kind = 72
)

// Tensor locations (the loc element of a tensor descriptor).
const (
	LocArena0 = 0 // supervisor-owned arena; offset relative to arena0_off
	LocArena1 = 1 // stub-owned arena; offset relative to arena1_off
	LocNone   = 2 // no bytes (size 0); offset is ignored
	// LocClient is a client's registered shared-memory region: offset is
	// relative to the registered part and the tensor's 7th element is the
	// region id of a MapRegion.
	LocClient = 3
	// LocCUDA is a client's registered CUDA region: offset is relative to
	// the pointer the region's IPC handle opens to, and the 7th element is
	// the region id of a MapRegion that carried the handle. Inputs only:
	// an output the stub wrote into any client region, CUDA or not, comes
	// back as LocClient (the request's output target already names the
	// region).
	LocCUDA = 4
	// LocInline carries the bytes in the message itself, as the tensor's
	// 7th element (a bin). Stubs use it for outputs and BLS inputs of at
	// most InlineMax bytes, where an arena block would cost more than it
	// saves: an allocation, a view, and a Release round trip to free it.
	// The supervisor uses it for Execute inputs of at most InlineMax
	// bytes while the message's inline bytes stay within a quarter of a
	// frame; larger inputs go in its arena.
	LocInline = 5
)

// InlineMax is the largest tensor a writer sends as LocInline.
const InlineMax = 1024

// Response flags.
const (
	// FlagFinal marks the last response of a request
	// (TRITONSERVER_RESPONSE_COMPLETE_FINAL).
	FlagFinal = 1
)

// Tensor describes one tensor whose bytes live in an arena:
// [name, dtype, shape, loc, offset, size], plus region_id when loc is
// LocClient or LocCUDA, or the bytes when it is LocInline (readers accept
// 6 or 7 elements).
type Tensor struct {
	Name     string
	DataType uint8
	Shape    []int64
	Loc      uint8
	Offset   uint64
	Size     uint64
	RegionID uint64
	// Data holds a LocInline tensor's bytes (a copy, never the ring).
	Data []byte
}

// OutputTarget asks the stub to write an output straight into a client
// region: [name, region_id, offset, byte_size].
type OutputTarget struct {
	Name     string
	RegionID uint64
	Offset   uint64
	Size     uint64
}

// Request is one inference request inside an Execute message:
// [handle, request_id, correlation_id, flags, inputs, requested_outputs,
// parameters_json, timeout_us, output_targets]. correlation_id is an int
// or a str. output_targets ([OutputTarget...]) is sent only when the client
// asked for outputs in shared memory. Readers ignore trailing elements they
// do not know.
type Request struct {
	Handle           uint64
	ID               string
	CorrelationID    any // uint64 or string
	Flags            uint32
	Inputs           []Tensor
	RequestedOutputs []string
	ParametersJSON   string
	TimeoutMicros    uint64
	OutputTargets    []OutputTarget
	// TraceContext is the trace context of a traced request (Execute) or
	// the one a BLS request was made with (InferExec); "" when untraced.
	TraceContext string
}

// Error is [code, message]; code is a backendapi.Code.
type Error struct {
	Code    uint8
	Message string
}

// Response is one response: [request_handle, flags, error, outputs,
// parameters_json]. parameters_json is "" when the model set none.
type Response struct {
	Handle         uint64
	Flags          uint32
	Error          *Error
	Outputs        []Tensor
	ParametersJSON string
}

// Message is one decoded frame: one of the *Msg types below, each the
// typed form of the array its Kind documents.
type Message interface {
	Kind() Kind
}

// InitializeMsg is [1, id, args, options].
type InitializeMsg struct {
	ID      uint64
	Args    map[string]string
	Options map[string]any
}

// ExecuteMsg is [2, batch_id, [Request...]].
type ExecuteMsg struct {
	BatchID  uint64
	Requests []Request
}

// FinalizeMsg is [3, id].
type FinalizeMsg struct{ ID uint64 }

// ReleaseMsg is [4, 0, [offset...]]: arena 1 blocks the supervisor no
// longer reads.
type ReleaseMsg struct{ Offsets []uint64 }

// CancelMsg is [5, request_handle].
type CancelMsg struct{ Handle uint64 }

// IsReadyMsg is [6, id].
type IsReadyMsg struct{ ID uint64 }

// CollectMetricsMsg is [11, id].
type CollectMetricsMsg struct{ ID uint64 }

// AutoCompleteMsg is [7, id, options, config_json].
type AutoCompleteMsg struct {
	ID         uint64
	Options    map[string]any
	ConfigJSON string
}

// InferResultMsg is [8, id, Response]: one response to the stub's
// InferExec with the same id.
type InferResultMsg struct {
	ID       uint64
	Response Response
}

// MapRegionMsg is [9, 0, region_id, region_offset, byte_size], plus
// [cuda_handle, device_id] for a CUDA region (CUDAHandle not nil).
type MapRegionMsg struct {
	RegionID   uint64
	Offset     uint64
	Size       uint64
	CUDAHandle []byte // cudaIpcMemHandle_t; nil for a system region
	DeviceID   int64  // CUDA regions only
}

// UnmapRegionMsg is [10, 0, region_id].
type UnmapRegionMsg struct{ RegionID uint64 }

// HelloMsg is [64, 0, version, pid, info].
type HelloMsg struct {
	Version int64
	PID     int64
	Info    map[string]string
}

// ResultMsg is [65, id, Error|nil, value]. Value decodes as nil, bool,
// int64, uint64, float64, string, []byte, []any or map[string]any.
type ResultMsg struct {
	ID    uint64
	Error *Error
	Value any
}

// ResponseMsg is [66, 0, Response]: one response sent through a response
// sender.
type ResponseMsg struct{ Response Response }

// ExecuteDoneMsg is [67, batch_id, Error|nil, [Response...], [handle...],
// [handle...]]; the last elements only when Rescheduled or Open is not
// empty.
type ExecuteDoneMsg struct {
	BatchID     uint64
	Error       *Error
	Responses   []Response
	Rescheduled []uint64 // handles of requests to run again
	Open        []uint64 // handles whose response a response sender sends later
}

// LogMsg is [68, 0, level, message, file, line].
type LogMsg struct {
	Level   string
	Message string
	File    string
	Line    int64
}

// InferExecMsg is [69, id, model_name, model_version, Request, decoupled].
type InferExecMsg struct {
	ID           uint64
	ModelName    string
	ModelVersion int64
	Request      Request
	Decoupled    bool
}

// FreeMsg is [70, 0, [offset...]]: arena 0 blocks the stub no longer reads.
type FreeMsg struct{ Offsets []uint64 }

// InferCancelMsg is [71, id]: cancel the stub's BLS request id.
type InferCancelMsg struct{ ID uint64 }

// ModelControlMsg is [72, id, op, model_name, options]. Options decode as
// ResultMsg values do.
type ModelControlMsg struct {
	ID      uint64
	Op      string
	Model   string
	Options map[string]any
}

// ControlResultMsg is [12, id, Error|nil, value]: the answer to a
// ModelControl. Value is nil, a bool or a string.
type ControlResultMsg struct {
	ID    uint64
	Error *Error
	Value any
}

func (*InitializeMsg) Kind() Kind { return KindInitialize }
func (*ExecuteMsg) Kind() Kind    { return KindExecute }
func (*FinalizeMsg) Kind() Kind   { return KindFinalize }
func (*ReleaseMsg) Kind() Kind    { return KindRelease }
func (*CancelMsg) Kind() Kind     { return KindCancel }
func (*IsReadyMsg) Kind() Kind    { return KindIsReady }

func (*CollectMetricsMsg) Kind() Kind { return KindCollectMetrics }
func (*AutoCompleteMsg) Kind() Kind   { return KindAutoComplete }
func (*InferResultMsg) Kind() Kind    { return KindInferResult }
func (*MapRegionMsg) Kind() Kind      { return KindMapRegion }
func (*UnmapRegionMsg) Kind() Kind    { return KindUnmapRegion }
func (*HelloMsg) Kind() Kind          { return KindHello }
func (*ResultMsg) Kind() Kind         { return KindResult }
func (*ResponseMsg) Kind() Kind       { return KindResponse }
func (*ExecuteDoneMsg) Kind() Kind    { return KindExecuteDone }
func (*LogMsg) Kind() Kind            { return KindLog }
func (*InferExecMsg) Kind() Kind      { return KindInferExec }
func (*FreeMsg) Kind() Kind           { return KindFree }
func (*InferCancelMsg) Kind() Kind    { return KindInferCancel }
func (*ModelControlMsg) Kind() Kind   { return KindModelCtl }
func (*ControlResultMsg) Kind() Kind  { return KindControlResult }
