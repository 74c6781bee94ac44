package stubproc

import (
	"errors"
	"fmt"
	"slices"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc"
)

// errBadOutput is a stub's output descriptor pointing where it may not.
var errBadOutput = errors.New("output in the wrong place")

// stubResponse is a response built from a stub's, with room for the
// outputs and arena blocks of a small one and what its release needs, so
// that a small response takes one allocation (and its release func one).
type stubResponse struct {
	resp   backendapi.InferResponse
	outBuf [2]backendapi.OutputTensor
	offBuf [2]uint64

	p     *Proc
	pr    *Request
	offs  []uint64
	bytes uint64
	held  bool
}

// release gives the response's blocks back: the stub's output blocks and,
// when it holds them, the request's input blocks.
func (sr *stubResponse) release() {
	p := sr.p
	if sr.held {
		p.freeRequestInputs(sr.pr)
	}
	p.releaseLater(sr.offs, sr.bytes)
	p.mu.Lock()
	p.refs--
	p.mu.Unlock()
	p.maybeUnmap()
}

// response builds the front end's view of a stub response in sr: outputs
// alias the stub's arena until Release.
func (p *Proc) response(sr *stubResponse, pr *Request, r *ipc.Response, offs []uint64, final bool) (*backendapi.InferResponse, error) {
	held := false
	if r.Error != nil {
		p.Release(offs)
		return nil, backendapi.Errorf(backendapi.Code(r.Error.Code), "%s", r.Error.Message)
	}
	if !pr.hold() {
		// The caller left: its request may already serve another.
		p.Release(offs)
		return nil, backendapi.Errorf(backendapi.Cancelled, "request for model '%s' was cancelled", p.cfg.Model)
	}
	defer pr.unhold()
	model := p.cfg.Model
	resp := &sr.resp
	*resp = backendapi.InferResponse{ModelName: model, ModelVersion: p.cfg.Version, ID: pr.req.ID, Outputs: sr.outBuf[:0]}
	if len(r.Outputs) > len(sr.outBuf) {
		resp.Outputs = make([]backendapi.OutputTensor, 0, len(r.Outputs))
	}
	if r.ParametersJSON != "" && r.ParametersJSON != "{}" {
		params, err := parseParametersJSON(r.ParametersJSON)
		if err != nil {
			p.Release(offs)
			return nil, backendapi.Errorf(backendapi.Internal, "model '%s' sent malformed response parameters: %v", model, err)
		}
		resp.Parameters = params
	}
	for _, t := range r.Outputs {
		if !wantOutput(pr.req, t.Name) {
			continue
		}
		ref := outputRef(pr.req, t.Name)
		if t.Loc == ipc.LocClient {
			// Written by the stub straight into the client's region.
			resp.Outputs = append(resp.Outputs, backendapi.OutputTensor{Name: t.Name, DataType: backendapi.DataType(t.DataType), Shape: t.Shape, SharedMemory: ref})
			continue
		}
		if ref != nil {
			p.Release(offs)
			return nil, backendapi.Errorf(backendapi.Internal, "model '%s' did not write output '%s' into shared memory region '%s' as requested", model, t.Name, ref.Region)
		}
		if t.Loc == ipc.LocArena0 && t.Size > 0 {
			// The model returned an input as it came: the output is the
			// input's block, which this response now holds.
			if err := p.holdsInput(pr, t, final); err != nil {
				p.Release(offs)
				return nil, backendapi.Errorf(backendapi.Internal, "model '%s' output '%s': %v", model, t.Name, err)
			}
			held = true
		}
		data, err := p.tensorData(t)
		if err != nil {
			p.Release(offs)
			return nil, backendapi.Errorf(backendapi.Internal, "model '%s' output '%s': %v", model, t.Name, err)
		}
		out := backendapi.OutputTensor{Name: t.Name, DataType: backendapi.DataType(t.DataType), Shape: t.Shape, Data: data}
		if k := classification(pr.req, t.Name); k > 0 {
			if out, err = classify(out, k, p.cfg.Batched, p.cfg.Labels[t.Name]); err != nil {
				p.Release(offs)
				return nil, err
			}
		}
		resp.Outputs = append(resp.Outputs, out)
	}
	if held {
		p.mu.Lock()
		pr.inputsHeld = true
		p.mu.Unlock()
	}
	if len(offs) > 0 || held {
		var bytes uint64
		for _, t := range r.Outputs {
			if t.Loc == ipc.LocArena1 {
				bytes += t.Size
			}
		}
		p.mu.Lock()
		p.refs++
		p.mu.Unlock()
		sr.p, sr.pr, sr.offs, sr.bytes, sr.held = p, pr, offs, bytes, held
		resp.SetRelease(sr.release)
	}
	return resp, nil
}

// holdsInput checks an output the stub placed in the supervisor's arena:
// only the final response of a non-decoupled model may, and only inside
// one of its own request's input blocks, which then live until the
// response is released.
func (p *Proc) holdsInput(pr *Request, t ipc.Tensor, final bool) error {
	if p.cfg.Decoupled || !final {
		return fmt.Errorf("in the supervisor's arena in a decoupled or non-final response: %w", errBadOutput)
	}
	for _, off := range pr.inputs {
		if n, ok := p.conn.OwnBlockSize(off); ok && t.Offset >= off && t.Offset+t.Size <= off+n && t.Offset+t.Size > t.Offset {
			return nil
		}
	}
	if p.stagedHolds(pr, t.Offset, t.Size) {
		return nil
	}
	return fmt.Errorf("[%d, +%d) in the supervisor's arena is none of the request's inputs: %w", t.Offset, t.Size, errBadOutput)
}

// tensorData returns the bytes of a tensor the stub sent: in the message,
// or in place in an arena.
func (p *Proc) tensorData(t ipc.Tensor) ([]byte, error) {
	if t.Loc == ipc.LocInline {
		return t.Data, nil
	}
	return p.conn.View(t.Loc, t.Offset, t.Size)
}

// outputRef returns the shared memory place the request asked for output
// name, or nil.
func outputRef(req *backendapi.InferRequest, name string) *backendapi.SharedMemoryRef {
	for _, o := range req.Outputs {
		if o.Name == name {
			return o.SharedMemory
		}
	}
	return nil
}

// wantOutput reports whether the request asked for the output (all outputs
// when it named none).
func wantOutput(req *backendapi.InferRequest, name string) bool {
	return len(req.Outputs) == 0 || slices.ContainsFunc(req.Outputs, func(o backendapi.RequestedOutput) bool { return o.Name == name })
}

// classification returns the number of classes the request asked for on
// an output (0: the raw tensor).
func classification(req *backendapi.InferRequest, name string) uint32 {
	for _, o := range req.Outputs {
		if o.Name == name {
			return o.Classification
		}
	}
	return 0
}
