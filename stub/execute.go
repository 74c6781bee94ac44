package stub

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc"
)

// request is the stub side of one ModelRequest (its requestEnv).
type request struct {
	h         *host
	handle    uint64
	requested []string
	targets   []ipc.OutputTarget // outputs the client wants in its shared memory

	mu        sync.Mutex
	pending   []ipc.Tensor // outputs allocated for the next response
	targetErr error        // an output that did not fit its target; fails the next response
	final     bool         // the final response went out; nothing more may
}

var _ requestEnv = (*request)(nil)

// target returns where the client wants output name, if in its shared
// memory.
func (r *request) target(name string) (ipc.OutputTarget, bool) {
	for _, tg := range r.targets {
		if tg.Name == name {
			return tg, true
		}
	}
	return ipc.OutputTarget{}, false
}

// Output allocates an output in the stub's arena and attaches it to the
// request's next response. An output the client asked for in a shared
// memory region is the region itself, so the model writes the result in
// place; one that does not fit there fails the response (the error is also
// returned, so the model can stop early). An output the client did not ask
// for gets ordinary memory instead and is dropped, which prunes it for
// free.
func (r *request) Output(name string, dt backendapi.DataType, shape []int64, n int) ([]byte, error) {
	if len(r.requested) > 0 && !slices.Contains(r.requested, name) {
		return make([]byte, n), nil
	}
	t := ipc.Tensor{Name: name, DataType: uint8(dt), Shape: slices.Clone(shape), Loc: ipc.LocNone}
	var buf []byte
	if tg, ok := r.target(name); ok {
		var err error
		if buf, t, err = r.h.target(tg, name, uint8(dt), t.Shape, n); err != nil {
			r.mu.Lock()
			if r.targetErr == nil {
				r.targetErr = err
			}
			r.mu.Unlock()
			return nil, err
		}
	} else if n > 0 {
		off, b, err := r.h.alloc(n)
		if err != nil {
			return nil, backendapi.Errorf(backendapi.Internal, "Failed to allocate output '%s' in the shared memory pool: %v", name, err)
		}
		t.Loc, t.Offset, t.Size, buf = ipc.LocArena1, off, uint64(n), b
	} else {
		buf = []byte{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.final {
		r.h.freeOwned(offsets([]ipc.Tensor{t}))
		return nil, errSenderClosed
	}
	r.pending = append(r.pending, t)
	return buf, nil
}

// errSenderClosed is Triton's text for a response after the final one.
var errSenderClosed = backendapi.Errorf(backendapi.Internal, "Unable to send response. Response sender has been closed.")

// Send sends one response through the response sender (decoupled models,
// or a model that answers before Execute returns).
func (r *request) Send(resp ModelResponse, final bool) error {
	var flags uint32
	if final {
		flags = ipc.FlagFinal
	}
	w, err := r.wire(resp, flags)
	if err != nil {
		return err
	}
	r.h.send(&ipc.ResponseMsg{Response: w})
	if final {
		r.h.forgetCancel(r.handle)
	}
	return nil
}

// Cancelled reports whether the supervisor sent Cancel for the request,
// reading the ring first if nobody else is.
func (r *request) Cancelled() bool {
	if r.h.isCancelled(r.handle) {
		return true
	}
	r.h.pump()
	return r.h.isCancelled(r.handle)
}

// wire turns a model response into its wire form: the outputs allocated
// since the last response plus the extra ones (copied into the arena),
// pruned to the requested outputs. A response after the final one is
// refused; a response whose outputs do not fit becomes an error.
func (r *request) wire(resp ModelResponse, flags uint32) (ipc.Response, error) {
	r.mu.Lock()
	if r.final {
		r.mu.Unlock()
		return ipc.Response{}, errSenderClosed
	}
	outs := r.pending
	r.pending = nil
	targetErr := r.targetErr
	r.targetErr = nil
	if flags&ipc.FlagFinal != 0 {
		r.final = true
	}
	r.mu.Unlock()
	w := ipc.Response{Handle: r.handle, Flags: flags, ParametersJSON: resp.Parameters}
	if resp.Err == nil && targetErr != nil {
		// The model went on after an output did not fit its region.
		resp.Err = targetErr
		w.ParametersJSON = ""
	}
	if resp.Err != nil {
		r.h.freeOwned(offsets(outs))
		w.Error = wireError(resp.Err)
		return w, nil
	}
	for _, t := range resp.Outputs {
		if len(r.requested) > 0 && !slices.Contains(r.requested, t.Name) {
			continue
		}
		if tg, ok := r.target(t.Name); ok {
			// The one copy of an output in ordinary memory: into the
			// client's region.
			buf, wt, err := r.h.target(tg, t.Name, uint8(t.DataType), t.Shape, len(t.Data))
			if err != nil {
				r.h.freeOwned(offsets(outs))
				return ipc.Response{Handle: r.handle, Flags: flags, Error: wireError(err)}, nil
			}
			copy(buf, t.Data)
			outs = append(outs, wt)
			continue
		}
		wt := ipc.Tensor{Name: t.Name, DataType: uint8(t.DataType), Shape: t.Shape, Loc: ipc.LocNone}
		if len(t.Data) > 0 {
			off, buf, err := r.h.alloc(len(t.Data))
			if err != nil {
				r.h.freeOwned(offsets(outs))
				w.Error = &ipc.Error{Code: uint8(backendapi.Internal), Message: "Failed to allocate the response outputs in the shared memory pool: " + err.Error()}
				w.ParametersJSON = ""
				return w, nil
			}
			copy(buf, t.Data)
			wt.Loc, wt.Offset, wt.Size = ipc.LocArena1, off, uint64(len(t.Data))
		}
		outs = append(outs, wt)
	}
	w.Outputs = outs
	return w, nil
}

// drop frees outputs allocated for a request that will get no response
// from the stub (the batch failed).
func (r *request) drop() {
	r.mu.Lock()
	outs := r.pending
	r.pending = nil
	r.final = true
	r.mu.Unlock()
	r.h.freeOwned(offsets(outs))
}

func offsets(ts []ipc.Tensor) []uint64 {
	var offs []uint64
	for _, t := range ts {
		if t.Loc == ipc.LocArena1 && t.Size > 0 {
			offs = append(offs, t.Offset)
		}
	}
	return offs
}

func wireError(err error) *ipc.Error {
	return &ipc.Error{Code: uint8(backendapi.CodeOf(err)), Message: backendapi.MessageOf(err)}
}

// execute runs one batch and answers with ExecuteDone. A panic in the
// model is logged and re-raised: the process dies and the supervisor
// restarts it (see the package doc).
func (h *host) execute(m *ipc.ExecuteMsg) {
	envs := make([]*request, len(m.Requests))
	reqs := make([]*ModelRequest, len(m.Requests))
	for i := range m.Requests {
		w := &m.Requests[i]
		env := &request{h: h, handle: w.Handle, requested: w.RequestedOutputs, targets: w.OutputTargets}
		mr := &ModelRequest{env: env}
		mr.ID, mr.Flags, mr.RequestedOutputs, mr.Parameters = w.ID, w.Flags, w.RequestedOutputs, w.ParametersJSON
		mr.Timeout = time.Duration(w.TimeoutMicros) * time.Microsecond
		switch c := w.CorrelationID.(type) {
		case string:
			mr.CorrelationID = backendapi.CorrelationID{String: c, IsText: true}
		case uint64:
			mr.CorrelationID = backendapi.CorrelationID{Uint: c}
		case int64:
			mr.CorrelationID = backendapi.CorrelationID{Uint: uint64(c)}
		}
		mr.Inputs = make([]Tensor, len(w.Inputs))
		for j, t := range w.Inputs {
			data, err := h.inputView(t)
			if err != nil {
				h.failBatch(m.BatchID, envs[:i], fmt.Errorf("input '%s' of request %d: %w", t.Name, w.Handle, err))
				return
			}
			mr.Inputs[j] = Tensor{Name: t.Name, DataType: backendapi.DataType(t.DataType), Shape: t.Shape, Data: data}
		}
		envs[i], reqs[i] = env, mr
	}
	if !h.initialized.Load() {
		//lint:ignore ST1005 the text mirrors Triton's Python backend, capital included
		h.failBatch(m.BatchID, envs, fmt.Errorf("Go model '%s' is not initialized: %w", h.instance, ErrNotInitialized))
		return
	}
	returned := h.callExecute(reqs)
	var again []uint64
	for i, r := range reqs {
		if r.Reschedule {
			again = append(again, envs[i].handle)
		}
	}
	if h.decoupled {
		if returned != nil {
			//lint:ignore ST1005 the text mirrors Triton's Python backend, capital included
			h.failBatch(m.BatchID, envs, fmt.Errorf("Go model '%s' is using the decoupled mode and Execute must return nil", h.instance))
			return
		}
		h.send(&ipc.ExecuteDoneMsg{BatchID: m.BatchID, Rescheduled: again})
		return
	}
	if len(returned) != len(reqs) {
		//lint:ignore ST1005 the text mirrors Triton's Python backend, capital included
		h.failBatch(m.BatchID, envs, fmt.Errorf("Number of responses does not match the number of requests. Request(s) size is:%d, and response(s) size is:%d", len(reqs), len(returned)))
		return
	}
	out := make([]ipc.Response, 0, len(envs))
	var open []uint64
	for i, env := range envs {
		if reqs[i].Reschedule {
			env.drop() // it runs again: this execute has no answer for it
			continue
		}
		if reqs[i].SendLater {
			// Listed even if Send already answered it: the supervisor
			// ends a request by its final response whichever comes first.
			open = append(open, env.handle)
			continue
		}
		w, err := env.wire(returned[i], ipc.FlagFinal)
		if err != nil {
			continue // answered through Send already
		}
		out = append(out, w)
	}
	h.send(&ipc.ExecuteDoneMsg{BatchID: m.BatchID, Responses: out, Rescheduled: again, Open: open})
	h.cancelMu.Lock()
	if len(h.cancelled) > 0 {
		for i, env := range envs {
			if !reqs[i].SendLater { // Send forgets it at the final response
				delete(h.cancelled, env.handle)
			}
		}
	}
	h.cancelMu.Unlock()
}

// inputView returns the bytes of an input: a zero-copy view of the
// supervisor's arena or of a client's region, bounds-checked, or the
// message's own copy of a small input (LocInline).
func (h *host) inputView(t ipc.Tensor) ([]byte, error) {
	switch t.Loc {
	case ipc.LocClient:
		return h.shm.view(t.RegionID, t.Offset, t.Size)
	case ipc.LocInline:
		return t.Data, nil // the decoder checked its length against Size
	}
	return h.conn.View(t.Loc, t.Offset, t.Size)
}

// callExecute calls the model's Execute, reporting a panic before it kills the
// process.
func (h *host) callExecute(reqs []*ModelRequest) []ModelResponse {
	defer func() {
		if p := recover(); p != nil {
			h.logf("ERROR", "Go model '%s' panicked in Execute: %v; the stub exits and is restarted", h.instance, p)
			panic(p)
		}
	}()
	return h.model.Execute(reqs)
}

// failBatch answers a batch with an error: the supervisor fails every
// request that has not had its final response.
func (h *host) failBatch(batchID uint64, envs []*request, err error) {
	text := fmt.Sprintf("Failed to process the request(s) for model '%s', message: %v", h.instance, err)
	h.logf("ERROR", "%s", text)
	for _, env := range envs {
		if env != nil {
			env.drop()
			h.forgetCancel(env.handle)
		}
	}
	h.send(&ipc.ExecuteDoneMsg{BatchID: batchID, Error: &ipc.Error{Code: uint8(backendapi.Internal), Message: text}})
}
