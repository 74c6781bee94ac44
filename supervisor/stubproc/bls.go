package stubproc

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc"
	"github.com/stubvisor/stubvisor/shmpool"
)

// The stub's side of the requests its model makes (BLS) and of the model
// loading API: the request read out of the stub's message and arena, and
// the answers written back into its region. Serving them is the host's.

// msgPoolGrowth is the start of Triton's text for a tensor that does not
// fit in the shared-memory pool.
const msgPoolGrowth = "Failed to increase the shared memory pool size"

// BLSRequest turns a stub's InferExec into a request for the callee. The
// inputs are read in place from the caller's arena; the offsets of those
// blocks are returned so the caller releases them once the request ended.
func (p *Proc) BLSRequest(m *ipc.InferExecMsg) (*backendapi.InferRequest, []uint64, error) {
	version := m.ModelVersion
	if version < 0 {
		version = 0 // pb_utils' default -1: the latest version, as in Triton
	}
	// The timeout is the request's queue timeout, as a client's is: a
	// model whose queue policy allows the override rejects the request
	// with "Request timeout expired" once it expires in the queue.
	req := &backendapi.InferRequest{
		ModelName: m.ModelName, ModelVersion: version, ID: m.Request.ID, Flags: m.Request.Flags,
		Timeout: time.Duration(m.Request.TimeoutMicros) * time.Microsecond,
	}
	switch id := m.Request.CorrelationID.(type) {
	case string:
		req.CorrelationID = backendapi.CorrelationID{String: id, IsText: true}
	case uint64:
		req.CorrelationID = backendapi.CorrelationID{Uint: id}
	case int64:
		req.CorrelationID = backendapi.CorrelationID{Uint: uint64(id)}
	}
	if m.Request.ParametersJSON != "" && m.Request.ParametersJSON != "{}" {
		params, err := parseParametersJSON(m.Request.ParametersJSON)
		if err != nil {
			return nil, nil, backendapi.Errorf(backendapi.InvalidArg, "BLS request parameters: %v", err)
		}
		req.Parameters = params
	}
	var blocks []uint64
	for _, t := range m.Request.Inputs {
		data, err := p.tensorData(t)
		if err != nil {
			return nil, blocks, backendapi.Errorf(backendapi.InvalidArg, "BLS request input '%s': %v", t.Name, err)
		}
		if t.Loc == ipc.LocArena1 && t.Size > 0 {
			blocks = append(blocks, t.Offset)
		}
		req.Inputs = append(req.Inputs, backendapi.InputTensor{Name: t.Name, DataType: backendapi.DataType(t.DataType), Shape: t.Shape, Data: data})
	}
	for _, name := range m.Request.RequestedOutputs {
		req.Outputs = append(req.Outputs, backendapi.RequestedOutput{Name: name})
	}
	return req, blocks, nil
}

// BLSReply sends the stub one answer to its request id: a response
// (copied into the supervisor's arena of the stub's region, which the
// stub frees with Free), an error, or, with neither, the bare final flag.
func (p *Proc) BLSReply(id uint64, resp *backendapi.InferResponse, err error, final bool) {
	r := ipc.Response{}
	if final {
		r.Flags = ipc.FlagFinal
	}
	if err != nil {
		r.Error = &ipc.Error{Code: uint8(backendapi.CodeOf(err)), Message: backendapi.MessageOf(err)}
	} else if resp != nil {
		p.blsResponse(resp, &r)
	}
	if err := p.conn.Send(&ipc.InferResultMsg{ID: id, Response: r}); err != nil && p.Alive() {
		p.log.Warn("send BLS response", "error", err)
	}
}

// blsResponse copies one response of the callee into the caller's region:
// outputs of at most ipc.InlineMax bytes into the message while its inline
// bytes stay within a quarter of a frame (as Execute's inputs: no arena
// block, no Free for it later), the others into the supervisor's arena.
// A response that does not fit fails with Triton's text.
func (p *Proc) blsResponse(resp *backendapi.InferResponse, r *ipc.Response) {
	if len(resp.Parameters) > 0 {
		r.ParametersJSON = parametersJSON(resp.Parameters)
	}
	inlineRoom := p.conn.MaxFrame() / 4
	for _, o := range resp.Outputs {
		t := ipc.Tensor{Name: o.Name, DataType: uint8(o.DataType), Shape: o.Shape, Loc: ipc.LocArena0, Size: uint64(len(o.Data))}
		if n := len(o.Data); n > 0 && n <= ipc.InlineMax && n <= inlineRoom {
			// Send encodes the message at once: the bytes need no copy.
			inlineRoom -= n
			t.Loc, t.Data = ipc.LocInline, o.Data
		} else if n > 0 {
			off, buf, err := p.conn.Alloc(uint64(len(o.Data)))
			if err != nil {
				for _, prev := range r.Outputs {
					if prev.Size > 0 && prev.Loc == ipc.LocArena0 {
						p.freeOwn([]uint64{prev.Offset})
					}
				}
				r.Outputs = nil
				code := backendapi.Unavailable
				text := fmt.Sprintf("BLS response output '%s': %v", o.Name, err)
				if errors.Is(err, shmpool.ErrPoolExhausted) {
					code = backendapi.Internal
					text = fmt.Sprintf("%s for BLS response output '%s': %v", msgPoolGrowth, o.Name, err)
				}
				r.Error = &ipc.Error{Code: uint8(code), Message: text}
				return
			}
			copy(buf, o.Data)
			t.Offset = off
		}
		r.Outputs = append(r.Outputs, t)
	}
}

// ChildTrace starts the trace of a BLS request made with the trace context
// of a traced request this stub is executing (trace=request.trace()), or
// returns nil when no such request is in flight here.
func (p *Proc) ChildTrace(m *ipc.InferExecMsg, version int64) *backendapi.Trace {
	var parent *Request
	p.mu.Lock()
	for _, pr := range p.requests {
		if tr := pr.trace; tr != nil && tr.Context == m.Request.TraceContext {
			parent = pr
			break
		}
	}
	p.mu.Unlock()
	if parent == nil || parent.trace.Child == nil || !parent.hold() {
		return nil // none, or its caller left (and its trace with it)
	}
	defer parent.unhold()
	return parent.trace.Child(m.ModelName, version, parent.started)
}

// ControlReply answers a stub's ModelControl call.
func (p *Proc) ControlReply(id uint64, value any, err error) {
	res := &ipc.ControlResultMsg{ID: id, Value: value}
	if err != nil {
		res.Error = &ipc.Error{Code: uint8(backendapi.CodeOf(err)), Message: backendapi.MessageOf(err)}
	}
	if err := p.conn.Send(res); err != nil && p.Alive() {
		p.log.Warn("send ControlResult", "error", err)
	}
}

// parametersJSON encodes request parameters for the stub.
func parametersJSON(p map[string]any) string {
	b, err := json.Marshal(p)
	if err != nil {
		return "{}"
	}
	return string(b)
}

// parseParametersJSON decodes response parameters from the stub, keeping
// integers as int64.
func parseParametersJSON(s string) (map[string]any, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var raw map[string]any
	if err := dec.Decode(&raw); err != nil {
		return nil, err
	}
	for k, v := range raw {
		if n, ok := v.(json.Number); ok {
			if i, err := n.Int64(); err == nil {
				raw[k] = i
			} else if f, err := n.Float64(); err == nil {
				raw[k] = f
			}
		}
	}
	return raw, nil
}
