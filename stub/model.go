package stub

import (
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
)

// Model is a model written in Go. Its binary calls stub.Serve(model) from
// main; the supervisor runs it in a stub process exactly like a Python
// model (same wire protocol, same restart and watchdog rules), so a Go
// model that crashes takes down only its own process.
//
// The supervisor calls Initialize once, then Execute for one batch at a
// time (never concurrently on one instance), then Finalize once before it
// stops the process.
type Model interface {
	// Initialize prepares the model. args carries the seven keys a Python
	// model gets: model_config (JSON), model_instance_kind,
	// model_instance_name, model_instance_device_id, model_repository,
	// model_version and model_name. An error fails the load; its Code
	// (Internal when it has none) and text reach the client.
	Initialize(args map[string]string) error

	// Execute runs one batch. A model that is not decoupled returns one
	// response per request, in order. A decoupled model returns nil and
	// answers through ModelRequest.Send, from any goroutine, until each
	// request's final response.
	Execute(requests []*ModelRequest) []ModelResponse

	// Finalize releases what Initialize acquired; the process exits after
	// it returns.
	Finalize() error
}

// ReadyChecker is implemented by a model whose readiness can change after
// Initialize (a lost connection to a device, say); without it a model is
// ready once initialised.
type ReadyChecker interface {
	IsReady() bool
}

// Tensor is a named tensor. In a ModelRequest its Data is a zero-copy view
// of the supervisor's shared memory (for an input of at most 1 KiB, which
// comes in the Execute message, the message's copy): read-only, and valid
// only while Execute runs (for a decoupled model, until the request's
// final response). Copy what must outlive that.
type Tensor struct {
	Name     string
	DataType backendapi.DataType
	Shape    []int64
	Data     []byte
}

// ModelResponse is a model's answer to one request: outputs, or an error
// (Err set, outputs ignored). Outputs allocated with ModelRequest.Output
// since the request's previous response belong to this response and need
// not be listed; Outputs lists extra tensors in ordinary Go memory, which
// are copied into shared memory.
type ModelResponse struct {
	Outputs []Tensor
	// Parameters is a JSON object of response parameters, or "".
	Parameters string
	// Err fails the request; build it with backendapi.Errorf to choose its Code
	// (Internal otherwise).
	Err error
}

// requestEnv is the stub side of one request: the allocator and sender
// behind ModelRequest's methods (request, in execute.go).
type requestEnv interface {
	// Output allocates an output tensor of n bytes for the request's next
	// response.
	Output(name string, dt backendapi.DataType, shape []int64, n int) ([]byte, error)
	// Send sends one response; final ends the request.
	Send(resp ModelResponse, final bool) error
	// Cancelled reports whether the client gave up on the request.
	Cancelled() bool
}

// ModelRequest is one inference request handed to Model.Execute.
type ModelRequest struct {
	ID            string
	CorrelationID backendapi.CorrelationID
	Flags         uint32
	// Inputs are views of shared memory (see Tensor).
	Inputs []Tensor
	// RequestedOutputs names the outputs the client asked for; empty means
	// all. Outputs not asked for are dropped by the stub, so a model need
	// not check.
	RequestedOutputs []string
	// Parameters is the request's parameters as a JSON object.
	Parameters string
	// Timeout is the client's timeout, 0 when it set none.
	Timeout time.Duration
	// Reschedule, set by Execute, hands the request back to run again in
	// a later batch instead of ending it (Triton's
	// TRITONSERVER_REQUEST_RELEASE_RESCHEDULE); only a model under
	// sequence_batching with iterative_sequence may, others fail the
	// request. A model that is not decoupled returns a zero
	// ModelResponse for it, which is dropped.
	Reschedule bool
	// SendLater, set by Execute of a model that is not decoupled, says the
	// request's one response comes later through Send (final true), from
	// any goroutine, after Execute returned (Python: returning None for a
	// request whose response sender the model kept). Execute returns a
	// zero ModelResponse for it, which is dropped. Its inputs stay valid
	// until that response; a request never answered waits until its
	// client gives up.
	SendLater bool

	env requestEnv
}

// Input returns the named input, or false when the request has none.
func (r *ModelRequest) Input(name string) (Tensor, bool) {
	for _, t := range r.Inputs {
		if t.Name == name {
			return t, true
		}
	}
	return Tensor{}, false
}

// Output allocates the bytes of an output tensor of a fixed-size type
// directly in the stub's shared memory, so the model fills it in place and
// nothing is copied on the way out. The output joins the request's next
// response (the return value of Execute, or the next Send).
func (r *ModelRequest) Output(name string, dt backendapi.DataType, shape []int64) ([]byte, error) {
	size := dt.Size()
	if size <= 0 {
		return nil, backendapi.Errorf(backendapi.InvalidArg, "output '%s': datatype %s has no fixed element size; use OutputBytes", name, dt)
	}
	n := size
	for _, d := range shape {
		if d < 0 {
			return nil, backendapi.Errorf(backendapi.InvalidArg, "output '%s': negative dimension in shape %v", name, shape)
		}
		n *= int(d)
	}
	return r.env.Output(name, dt, shape, n)
}

// OutputBytes is Output for a tensor of n bytes whose size the datatype
// does not fix (BYTES: each element a 4-byte little-endian length and its
// bytes).
func (r *ModelRequest) OutputBytes(name string, dt backendapi.DataType, shape []int64, n int) ([]byte, error) {
	if n < 0 {
		return nil, backendapi.Errorf(backendapi.InvalidArg, "output '%s': negative size %d", name, n)
	}
	return r.env.Output(name, dt, shape, n)
}

// Send sends a response to the request of a decoupled model (or of one
// that set SendLater), from any goroutine; final marks the last one (a final response may be empty:
// Send(ModelResponse{}, true)). After the final response the request's
// inputs are no longer valid.
func (r *ModelRequest) Send(resp ModelResponse, final bool) error {
	return r.env.Send(resp, final)
}

// Cancelled reports whether the client gave up on the request, so a long
// or streaming model can stop early.
func (r *ModelRequest) Cancelled() bool { return r.env.Cancelled() }
