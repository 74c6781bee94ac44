package supervisor

import (
	"context"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc"
)

// bls serves an inference request a model makes from inside execute
// (Business Logic Scripting). The inputs are read in place from the
// caller's arena and copied once, into the callee's; every response is
// copied into the supervisor's arena of the caller's region and sent as an
// InferResult, which the caller's stub frees with Free.
func (s *Supervisor) bls(p *stubProc, m *ipc.InferExecMsg) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-p.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	if m.Request.TimeoutMicros > 0 {
		var c context.CancelFunc
		ctx, c = context.WithTimeout(ctx, time.Duration(m.Request.TimeoutMicros)*time.Microsecond)
		defer c()
	}
	var inputBlocks []uint64
	defer func() { p.release(inputBlocks) }()
	req := &backendapi.InferRequest{ModelName: m.ModelName, ModelVersion: m.ModelVersion, ID: m.Request.ID, Flags: m.Request.Flags}
	switch id := m.Request.CorrelationID.(type) {
	case string:
		req.CorrelationID = backendapi.CorrelationID{String: id, IsText: true}
	case uint64:
		req.CorrelationID = backendapi.CorrelationID{Uint: id}
	case int64:
		req.CorrelationID = backendapi.CorrelationID{Uint: uint64(id)}
	}
	reply := func(r ipc.Response) {
		if err := p.conn.Send(&ipc.InferResultMsg{ID: m.ID, Response: r}); err != nil && p.alive() {
			p.log.Warn("send BLS response", "error", err)
		}
	}
	fail := func(err error) {
		reply(ipc.Response{Flags: ipc.FlagFinal, Error: &ipc.Error{Code: uint8(backendapi.CodeOf(err)), Message: backendapi.MessageOf(err)}})
	}
	if m.Request.ParametersJSON != "" && m.Request.ParametersJSON != "{}" {
		params, err := parseParametersJSON(m.Request.ParametersJSON)
		if err != nil {
			fail(backendapi.Errorf(backendapi.InvalidArg, "BLS request parameters: %v", err))
			return
		}
		req.Parameters = params
	}
	for _, t := range m.Request.Inputs {
		data, err := p.tensorData(t)
		if err != nil {
			fail(backendapi.Errorf(backendapi.InvalidArg, "BLS request input '%s': %v", t.Name, err))
			return
		}
		if t.Loc == ipc.LocArena1 && t.Size > 0 {
			inputBlocks = append(inputBlocks, t.Offset)
		}
		req.Inputs = append(req.Inputs, backendapi.InputTensor{Name: t.Name, DataType: backendapi.DataType(t.DataType), Shape: t.Shape, Data: data})
	}
	for _, name := range m.Request.RequestedOutputs {
		req.Outputs = append(req.Outputs, backendapi.RequestedOutput{Name: name})
	}
	sentFinal := false
	err := s.InferStream(ctx, req, func(resp *backendapi.InferResponse, err error, final bool) {
		r := ipc.Response{}
		if final {
			r.Flags = ipc.FlagFinal
			sentFinal = true
		}
		if err != nil {
			r.Error = &ipc.Error{Code: uint8(backendapi.CodeOf(err)), Message: backendapi.MessageOf(err)}
			reply(r)
			return
		}
		if resp != nil {
			if len(resp.Parameters) > 0 {
				r.ParametersJSON = parametersJSON(resp.Parameters)
			}
			for _, o := range resp.Outputs {
				t := ipc.Tensor{Name: o.Name, DataType: uint8(o.DataType), Shape: o.Shape, Loc: ipc.LocArena0, Size: uint64(len(o.Data))}
				if len(o.Data) > 0 {
					off, buf, err := p.conn.Alloc(uint64(len(o.Data)))
					if err != nil {
						for _, prev := range r.Outputs {
							p.freeOwn([]uint64{prev.Offset})
						}
						r.Outputs = nil
						r.Error = &ipc.Error{Code: uint8(backendapi.Unavailable), Message: "BLS response output '" + o.Name + "': " + err.Error()}
						break
					}
					copy(buf, o.Data)
					t.Offset = off
				}
				r.Outputs = append(r.Outputs, t)
			}
		}
		reply(r)
	})
	if err != nil {
		fail(err)
	} else if !sentFinal {
		reply(ipc.Response{Flags: ipc.FlagFinal})
	}
}
