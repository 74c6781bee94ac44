package supervisor

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc"
)

// pending is one request from the moment it is queued until its final
// response. Exactly one of complete/fail ends it; both are idempotent.
type pending struct {
	ctx context.Context
	req *backendapi.InferRequest
	// trace is req.Trace, kept apart because req may be read only under
	// hold once the request is queued.
	trace   *backendapi.Trace
	batch   int64 // the request's batch size (1 without batching)
	queued  time.Time
	started time.Time // handed to a stub

	// stream receives every response of a streaming request; nil for Infer.
	stream func(*backendapi.InferResponse, error, bool)
	// own makes stream the owner of the responses it gets (submitTo).
	own bool

	mu    sync.Mutex
	ended bool
	// statsDone is set by the finish that records the statistics.
	statsDone bool
	done      chan struct{}
	resp      *backendapi.InferResponse
	err       error
	// abandoned is set when the caller stopped waiting; a response that
	// arrives later is released at once.
	abandoned bool

	// runner is the stub process the request was sent to; assigned closes
	// when it is set, so a waiting caller can start reading its ring.
	runner   atomic.Pointer[stubProc]
	assigned chan struct{}
	// Set by the stub process that executes the request.
	handle uint64
	inputs []uint64 // arena 0 offsets of the inputs
	// inputsHeld is set when the response's outputs are the inputs' own
	// bytes (a model that returns an input unchanged): the response's
	// release frees the inputs, nobody else.
	inputsHeld bool
	execDone   bool // the batch's ExecuteDone arrived
	final      bool // the final response arrived
	// onEnd runs once when the request ends (clientshm.go: releases the
	// client regions it used).
	onEnd func()
	// reqMu is held while the supervisor reads req after the request was
	// queued (copying inputs, building a response): a front end may reuse
	// req as soon as Infer returns, so a caller that leaves (leave) waits
	// for such a use to end, and none starts after it.
	reqMu sync.Mutex
	left  bool
	// filler marks a request the sequence batcher made up to keep a
	// direct batch's slots in place: no caller, no statistics, and its
	// responses are dropped.
	filler bool
	// cancelled is set once the request is cancelled (its caller gave up,
	// or a BLS caller cancelled it): a queued request is dropped, and the
	// stub running it is told (Cancel), so request.is_cancelled() turns
	// true in the model.
	cancelled atomic.Bool

	// solo and soloItems are the one-request batch of the default
	// scheduler, allocated with the request.
	solo      batch
	soloItems [1]*pending
}

func newPending(ctx context.Context, req *backendapi.InferRequest, batch int64) *pending {
	return &pending{ctx: ctx, req: req, trace: req.Trace, batch: batch, queued: time.Now(), done: make(chan struct{}), assigned: make(chan struct{})}
}

// soloBatch returns the request's own one-request batch. A request is
// enqueued once, so the batch is used once.
func (p *pending) soloBatch() *batch {
	p.soloItems[0] = p
	p.solo.items = p.soloItems[:]
	return &p.solo
}

// respond delivers one response. It reports whether the caller took the
// response (when not, the caller of respond releases it) and whether this
// call ended the request (true exactly once per request).
func (p *pending) respond(resp *backendapi.InferResponse, err error, final bool) (taken, ended bool) {
	if p.stream == nil && err == nil {
		// A non-decoupled model answers once: its response is final.
		final = true
	}
	p.mu.Lock()
	if p.ended {
		p.mu.Unlock()
		return false, false
	}
	if final {
		p.ended = true
		if end := p.onEnd; end != nil {
			p.onEnd = nil
			defer end() // after p.mu is unlocked
		}
	}
	if p.stream != nil {
		p.mu.Unlock()
		p.stream(resp, err, final)
		if final {
			close(p.done)
		}
		// Streamed responses are only valid during the callback, unless
		// the callback owns them.
		return p.own && resp != nil, final
	}
	defer p.mu.Unlock()
	if !final {
		return false, false
	}
	if p.abandoned {
		close(p.done)
		return false, true
	}
	p.resp, p.err = resp, err
	close(p.done)
	return true, true
}

// claimStats reports whether the response (err, final) about to be
// delivered ends the request and nobody recorded its statistics yet; true
// at most once per request.
func (p *pending) claimStats(err error, final bool) bool {
	if !final && !(p.stream == nil && err == nil) {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended || p.statsDone {
		return false
	}
	p.statsDone = true
	return true
}

// assign records the stub process the request is sent to. A request
// cancelled before that is cancelled on the stub too: the stub keeps the
// handle, so the Cancel may even arrive before the Execute.
func (p *pending) assign(sp *stubProc) {
	if p.runner.CompareAndSwap(nil, sp) {
		close(p.assigned)
	}
	if p.cancelled.Load() {
		p.tellStub(sp)
	}
}

// cancel cancels the request: a queued one is dropped when its batch is
// formed, a running one is reported to its stub. The request still ends
// as usual (the model decides how it answers a cancelled request).
func (p *pending) cancel() {
	if p.cancelled.Swap(true) {
		return
	}
	if sp := p.runner.Load(); sp != nil {
		p.tellStub(sp)
	}
}

// tellStub sends Cancel for the request to the stub that runs it, unless
// the request has already ended.
func (p *pending) tellStub(sp *stubProc) {
	p.mu.Lock()
	ended := p.ended
	p.mu.Unlock()
	if ended || !sp.alive() {
		return
	}
	sp.mu.Lock()
	handle := p.handle
	sp.mu.Unlock()
	if err := sp.conn.Send(&ipc.CancelMsg{Handle: handle}); err != nil && sp.alive() {
		sp.log.Warn("send Cancel", "handle", handle, "error", err)
	}
}

// await blocks until the request ends (true) or its context is done
// (false). Once a stub runs the request, the caller takes its turn reading
// that stub's ring (stubProc.read), so it usually reads its own response
// itself instead of being woken by another goroutine that did.
func (p *pending) await() bool {
	for {
		// Most often the request ended while this caller read the ring
		// itself: see that without a select over every channel.
		select {
		case <-p.done:
			return true
		default:
		}
		assigned, lead := p.assigned, (chan struct{})(nil)
		sp := p.runner.Load()
		if sp != nil {
			assigned = nil
			if sp.alive() {
				lead = sp.lead
			}
		}
		select {
		case <-p.done:
			return true
		case <-p.ctx.Done():
			return false
		case <-assigned:
		case <-lead:
			sp.read(p.done, p.ctx.Done())
		}
	}
}

// wait blocks until the request ends or ctx is done.
func (p *pending) wait() (*backendapi.InferResponse, error) {
	if p.await() {
		return p.resp, p.err
	}
	p.mu.Lock()
	if p.ended {
		p.mu.Unlock()
		return p.resp, p.err
	}
	p.abandoned = true
	go p.cancel()
	if sp := p.runner.Load(); sp != nil {
		// The stub still owes this request an answer, and it holds a
		// pipeline slot until someone reads it: read on the caller's
		// behalf, or a queued request could wait for the watchdog's drain.
		go sp.readFor(p.done)
	}
	p.mu.Unlock()
	err := backendapi.Errorf(backendapi.Cancelled, "request for model '%s' cancelled: %v", p.req.ModelName, p.ctx.Err())
	p.leave()
	return nil, err
}

// hold starts a use of req by the supervisor; it fails once the caller
// left. unhold ends the use.
func (p *pending) hold() bool {
	p.reqMu.Lock()
	if p.left {
		p.reqMu.Unlock()
		return false
	}
	return true
}

func (p *pending) unhold() { p.reqMu.Unlock() }

// leave is called by a caller that stops waiting: once it returns, the
// supervisor does not touch req any more (see reqMu).
func (p *pending) leave() {
	p.reqMu.Lock()
	p.left = true
	p.reqMu.Unlock()
}

// gone reports whether nobody waits for the request any more.
func (p *pending) gone() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ended || p.abandoned || p.cancelled.Load() || p.ctx.Err() != nil
}

// batch is the unit handed to one execute call.
type batch struct {
	id    uint64
	items []*pending
	sent  time.Time
	// requeue, set by a scheduler that can run a request again (iterative
	// sequences), takes each request the model released with RESCHEDULE.
	// Without it such a request fails.
	requeue func(*pending)
	// msg and msgReqs are where execute builds the Execute message of a
	// one-request batch, so that sending it allocates nothing.
	msg     ipc.ExecuteMsg
	msgReqs [1]ipc.Request
}

// onEnd registers f to run once the request has ended (right away when it
// already has).
func (pr *pending) setOnEnd(f func()) {
	pr.mu.Lock()
	if !pr.ended {
		prev := pr.onEnd
		pr.onEnd = func() {
			if prev != nil {
				prev()
			}
			f()
		}
		pr.mu.Unlock()
		return
	}
	pr.mu.Unlock()
	f()
}
