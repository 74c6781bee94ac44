package supervisor

import (
	"context"
	"sync"
	"time"

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
// one. A non-nil stop is the reader's that found the call (it serves the
// call itself, as an ensemble runs a step): when stop closes before the
// call ends, the rest goes on on a goroutine of its own.
func (s *Supervisor) bls(p *stubproc.Proc, m *ipc.InferExecMsg, stop <-chan struct{}) {
	req, blocks, err := p.BLSRequest(m)
	if err != nil {
		p.Release(blocks)
		p.BLSReply(m.ID, nil, blsSubmitError(m.ModelName, err), true)
		return
	}
	mv, err := s.lookup(req.ModelName, req.ModelVersion)
	if err != nil {
		p.Release(blocks)
		p.BLSReply(m.ID, nil, blsSubmitError(m.ModelName, err), true)
		return
	}
	if stop != nil && len(mv.steps) > 0 {
		// An ensemble runs on the goroutine that submits it, to its end:
		// not on a reader whose own request may give up meanwhile.
		go s.blsSubmit(p, m, req, blocks, mv, nil)
		return
	}
	s.blsSubmit(p, m, req, blocks, mv, stop)
}

// blsSubmit queues the BLS request req (its inputs in the caller's blocks)
// for mv and waits for its end, as bls says.
func (s *Supervisor) blsSubmit(p *stubproc.Proc, m *ipc.InferExecMsg, req *backendapi.InferRequest, blocks []uint64, mv *modelVersion, stop <-chan struct{}) {
	var endTrace func()
	if m.Request.TraceContext != "" {
		if req.Trace = p.ChildTrace(m, req.ModelVersion); req.Trace != nil {
			endTrace = req.Trace.End
		}
	}
	c := &blsCall{p: p, id: m.ID, model: req.ModelName, blocks: blocks, endTrace: endTrace}
	// The request lives as long as the calling stub: its context is done
	// once the stub exited (no goroutine watches for that).
	pr, err := mv.submit(stubContext{p}, req, c.reply)
	if err != nil {
		c.end()
		p.BLSReply(m.ID, nil, blsSubmitError(m.ModelName, err), true)
		return
	}
	c.mv, c.pr, c.key = mv, pr, blsKey{p, m.ID}
	if s.blsReg.add(c.key, pr) {
		pr.Cancel()
	}
	if stop == nil {
		s.blsDone(c, pr.Await())
		return
	}
	if ended, stopped := pr.AwaitServing(stop, p); stopped {
		go func() { s.blsDone(c, pr.Await()) }()
	} else {
		s.blsDone(c, ended)
	}
}

// blsCall is one BLS request's state between its submission and its end.
type blsCall struct {
	p        *stubproc.Proc
	id       uint64
	model    string
	blocks   []uint64 // the caller's arena blocks holding the inputs
	endTrace func()
	mv       *modelVersion
	pr       *stubproc.Request
	key      blsKey
	// sentFinal is set by reply, which the callee's reader calls before
	// the request ends (Await returns after it).
	sentFinal bool
}

// reply sends the caller one response of the callee.
func (c *blsCall) reply(resp *backendapi.InferResponse, err error, final bool) {
	c.sentFinal = c.sentFinal || final
	c.p.BLSReply(c.id, resp, err, final)
}

// end releases the inputs and ends the trace.
func (c *blsCall) end() {
	c.p.Release(c.blocks)
	if c.endTrace != nil {
		c.endTrace()
	}
}

// blsDone ends a BLS request once Await returned (ended false: the calling
// stub died, nobody reads the answer).
func (s *Supervisor) blsDone(c *blsCall, ended bool) {
	defer c.end()
	defer s.blsReg.remove(c.key)
	if !ended {
		c.mv.abandon(c.pr, backendapi.Errorf(backendapi.Cancelled, "BLS request for model '%s' cancelled: %v", c.model, context.Canceled))
		<-c.pr.Done() // another goroutine that ended it first may still be in its final call
		return
	}
	if !c.sentFinal {
		c.p.BLSReply(c.id, nil, nil, true)
	}
}

// stubContext is the context of a stub's BLS requests: done once the stub
// exited.
type stubContext struct{ p *stubproc.Proc }

func (stubContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c stubContext) Done() <-chan struct{}     { return c.p.Exited() }
func (stubContext) Value(any) any               { return nil }

func (c stubContext) Err() error {
	select {
	case <-c.p.Exited():
		return context.Canceled
	default:
		return nil
	}
}
