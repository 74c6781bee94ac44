package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc"
	"github.com/stubvisor/stubvisor/shmpool"
)

// blsKey names one BLS request in flight: the calling stub and the id it
// gave the request.
type blsKey struct {
	p  *stubProc
	id uint64
}

// blsCalls holds the BLS requests in flight, so that InferCancel finds the
// request to cancel.
type blsCalls struct {
	mu    sync.Mutex
	calls map[blsKey]*pending
	// early holds cancels that arrived before their request was queued.
	early map[blsKey]bool
}

// add registers a queued BLS request; it reports whether the caller
// cancelled it already.
func (c *blsCalls) add(k blsKey, pr *pending) (cancelled bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.early[k] {
		delete(c.early, k)
		return true
	}
	if c.calls == nil {
		c.calls = map[blsKey]*pending{}
	}
	c.calls[k] = pr
	return false
}

func (c *blsCalls) remove(k blsKey) {
	c.mu.Lock()
	delete(c.calls, k)
	delete(c.early, k)
	c.mu.Unlock()
}

// cancel cancels the BLS request k (ResponseIterator.cancel()).
func (c *blsCalls) cancel(k blsKey) {
	c.mu.Lock()
	pr := c.calls[k]
	if pr == nil {
		if c.early == nil {
			c.early = map[blsKey]bool{}
		}
		if len(c.early) < maxEarlyCancels {
			c.early[k] = true
		}
	}
	c.mu.Unlock()
	if pr != nil {
		pr.cancel()
	}
}

// maxEarlyCancels bounds the cancels kept for requests not seen yet (a
// cancel for a request that already ended is kept too, and never taken).
const maxEarlyCancels = 1024

// blsInferCancel handles a stub's InferCancel.
func (s *Supervisor) blsInferCancel(p *stubProc, m *ipc.InferCancelMsg) {
	s.blsReg.cancel(blsKey{p, m.ID})
}

// msgPoolGrowth is the start of Triton's text for a tensor that does not
// fit in the shared-memory pool.
const msgPoolGrowth = "Failed to increase the shared memory pool size"

// blsRequest turns a stub's InferExec into a request for the callee. The
// inputs are read in place from the caller's arena; the offsets of those
// blocks are returned so the caller releases them once the request ended.
func (p *stubProc) blsRequest(m *ipc.InferExecMsg) (*backendapi.InferRequest, []uint64, error) {
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

// bls serves an inference request a model makes from inside execute
// (Business Logic Scripting). The inputs are read in place from the
// caller's arena and copied once, into the callee's; every response is
// copied into the supervisor's arena of the caller's region and sent as an
// InferResult, which the caller's stub frees with Free. The caller may
// cancel the request (InferCancel); its responses still end with a final
// one.
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
	reply := func(r ipc.Response) {
		if err := p.conn.Send(&ipc.InferResultMsg{ID: m.ID, Response: r}); err != nil && p.alive() {
			p.log.Warn("send BLS response", "error", err)
		}
	}
	fail := func(err error) {
		reply(ipc.Response{Flags: ipc.FlagFinal, Error: &ipc.Error{Code: uint8(backendapi.CodeOf(err)), Message: backendapi.MessageOf(err)}})
	}
	req, blocks, err := p.blsRequest(m)
	defer func() { p.release(blocks) }()
	if err != nil {
		fail(err)
		return
	}
	mv, err := s.lookup(req.ModelName, req.ModelVersion)
	if err != nil {
		fail(err)
		return
	}
	if m.Request.TraceContext != "" {
		if req.Trace = p.childTrace(m, req.ModelVersion); req.Trace != nil && req.Trace.End != nil {
			defer req.Trace.End()
		}
	}
	sentFinal := false
	pr, err := mv.submit(ctx, req, func(resp *backendapi.InferResponse, err error, final bool) {
		r := ipc.Response{}
		if final {
			r.Flags = ipc.FlagFinal
			sentFinal = true
		}
		if err != nil {
			r.Error = &ipc.Error{Code: uint8(backendapi.CodeOf(err)), Message: backendapi.MessageOf(err)}
		} else if resp != nil {
			p.blsResponse(resp, &r)
		}
		reply(r)
	})
	if err != nil {
		fail(err)
		return
	}
	key := blsKey{p, m.ID}
	if s.blsReg.add(key, pr) {
		pr.cancel()
	}
	defer s.blsReg.remove(key)
	if !pr.await() {
		// The calling stub died: nobody reads the answer.
		mv.abandon(pr, backendapi.Errorf(backendapi.Cancelled, "BLS request for model '%s' cancelled: %v", req.ModelName, ctx.Err()))
		<-pr.done // another goroutine that ended it first may still be in its final call
		return
	}
	if !sentFinal {
		reply(ipc.Response{Flags: ipc.FlagFinal})
	}
}

// blsResponse copies one response of the callee into the caller's region.
// A response that does not fit fails with Triton's text.
func (p *stubProc) blsResponse(resp *backendapi.InferResponse, r *ipc.Response) {
	if len(resp.Parameters) > 0 {
		r.ParametersJSON = parametersJSON(resp.Parameters)
	}
	for _, o := range resp.Outputs {
		t := ipc.Tensor{Name: o.Name, DataType: uint8(o.DataType), Shape: o.Shape, Loc: ipc.LocArena0, Size: uint64(len(o.Data))}
		if len(o.Data) > 0 {
			off, buf, err := p.conn.Alloc(uint64(len(o.Data)))
			if err != nil {
				for _, prev := range r.Outputs {
					if prev.Size > 0 {
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

// childTrace starts the trace of a BLS request made with the trace context
// of a traced request this stub is executing (trace=request.trace()), or
// returns nil when no such request is in flight here.
func (p *stubProc) childTrace(m *ipc.InferExecMsg, version int64) *backendapi.Trace {
	var parent *pending
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
