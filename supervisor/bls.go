package supervisor

import (
	"context"
	"sync"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc"
	"github.com/stubvisor/stubvisor/supervisor/stubproc"
)

// blsKey names one BLS request in flight: the calling stub and the id it
// gave the request.
type blsKey struct {
	p  *stubproc.Proc
	id uint64
}

// blsCalls holds the BLS requests in flight, so that InferCancel finds the
// request to cancel.
type blsCalls struct {
	mu    sync.Mutex
	calls map[blsKey]*stubproc.Request
	// early holds cancels that arrived before their request was queued.
	early map[blsKey]bool
}

// add registers a queued BLS request; it reports whether the caller
// cancelled it already.
func (c *blsCalls) add(k blsKey, pr *stubproc.Request) (cancelled bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.early[k] {
		delete(c.early, k)
		return true
	}
	if c.calls == nil {
		c.calls = map[blsKey]*stubproc.Request{}
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
		pr.Cancel()
	}
}

// maxEarlyCancels bounds the cancels kept for requests not seen yet (a
// cancel for a request that already ended is kept too, and never taken).
const maxEarlyCancels = 1024

// blsSubmitError is a BLS request's error before it reached the callee's
// queue (no such model, a bad input, a full queue), with the prefix Triton's
// Python backend puts on it, so the model sees Triton's text.
func blsSubmitError(model string, err error) error {
	return backendapi.Errorf(backendapi.CodeOf(err), "Model %s - Error when running inference: %s", model, backendapi.MessageOf(err))
}

// bls serves an inference request a model makes from inside execute
// (Business Logic Scripting). The inputs are read in place from the
// caller's arena and copied once, into the callee's; every response is
// copied into the supervisor's arena of the caller's region and sent as an
// InferResult, which the caller's stub frees with Free. The caller may
// cancel the request (InferCancel); its responses still end with a final
// one.
func (s *Supervisor) bls(p *stubproc.Proc, m *ipc.InferExecMsg) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-p.Exited():
			cancel()
		case <-ctx.Done():
		}
	}()
	req, blocks, err := p.BLSRequest(m)
	defer func() { p.Release(blocks) }()
	if err != nil {
		p.BLSReply(m.ID, nil, blsSubmitError(m.ModelName, err), true)
		return
	}
	mv, err := s.lookup(req.ModelName, req.ModelVersion)
	if err != nil {
		p.BLSReply(m.ID, nil, blsSubmitError(m.ModelName, err), true)
		return
	}
	if m.Request.TraceContext != "" {
		if req.Trace = p.ChildTrace(m, req.ModelVersion); req.Trace != nil && req.Trace.End != nil {
			defer req.Trace.End()
		}
	}
	sentFinal := false
	pr, err := mv.submit(ctx, req, func(resp *backendapi.InferResponse, err error, final bool) {
		sentFinal = sentFinal || final
		p.BLSReply(m.ID, resp, err, final)
	})
	if err != nil {
		p.BLSReply(m.ID, nil, blsSubmitError(m.ModelName, err), true)
		return
	}
	key := blsKey{p, m.ID}
	if s.blsReg.add(key, pr) {
		pr.Cancel()
	}
	defer s.blsReg.remove(key)
	if !pr.Await() {
		// The calling stub died: nobody reads the answer.
		mv.abandon(pr, backendapi.Errorf(backendapi.Cancelled, "BLS request for model '%s' cancelled: %v", req.ModelName, ctx.Err()))
		<-pr.Done() // another goroutine that ended it first may still be in its final call
		return
	}
	if !sentFinal {
		p.BLSReply(m.ID, nil, nil, true)
	}
}
