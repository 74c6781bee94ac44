package stubproc

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc"
)

// Request is one request from the moment it is queued until its final
// response. Its fields belong to this package: schedulers read them
// through methods, and only the exchange and Respond write them.
type Request struct {
	ctx context.Context
	req *backendapi.InferRequest
	// trace is req.Trace, kept apart because req may be read only under
	// hold once the request is queued.
	trace   *backendapi.Trace
	size    int64 // the request's batch size (1 without batching)
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
	runner   atomic.Pointer[Proc]
	assigned chan struct{}
	// Set by the stub process that executes the request.
	handle uint64
	inputs []uint64 // arena 0 offsets of the inputs
	// staged is the lent block (StageInputs) some inputs were sent in
	// place from, held until the stub no longer reads them.
	staged *backendapi.InputBuffer
	// inputsHeld is set when the response's outputs are the inputs' own
	// bytes (a model that returns an input unchanged): the response's
	// release frees the inputs, nobody else.
	inputsHeld bool
	execDone   bool // the batch's ExecuteDone arrived
	final      bool // the final response arrived
	// onEnd runs once when the request ends (prepare: releases the
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

	// queuedFn is req.Queued, called once by NotifyQueued.
	queuedFn func()
	notified bool

	// solo and soloItems are the one-request batch of the default
	// scheduler, allocated with the request.
	solo      Batch
	soloItems [1]*Request
}

// NewRequest starts a request of batch size size, queued now. stream, when
// set, receives every response (a streaming request); with own, stream
// takes over every response it gets and releases it itself (an ensemble
// keeps a step's outputs in the stub's arena until the steps that read
// them are done).
func NewRequest(ctx context.Context, req *backendapi.InferRequest, size int64, stream func(*backendapi.InferResponse, error, bool), own bool) *Request {
	return &Request{ctx: ctx, req: req, trace: req.Trace, size: size, queued: time.Now(), done: make(chan struct{}), assigned: make(chan struct{}), stream: stream, own: own, queuedFn: req.Queued}
}

// NotifyQueued tells the front end, once, that the request has its place
// in the queue (InferRequest.Queued). The submitting goroutine calls it
// after Enqueue; a scheduler that runs the request within Enqueue (the
// ensemble) calls it before it starts.
func (p *Request) NotifyQueued() {
	if p.notified {
		return
	}
	p.notified = true
	if p.queuedFn != nil {
		p.queuedFn()
	}
}

// NewFiller is a request the sequence batcher makes up to keep a direct
// batch's slots in place: no caller, no statistics, and its responses are
// dropped.
func NewFiller(req *backendapi.InferRequest) *Request {
	pr := NewRequest(context.Background(), req, 1, nil, false)
	pr.filler = true
	return pr
}

// Context is the caller's context.
func (p *Request) Context() context.Context { return p.ctx }

// Req is the request as the caller sent it, or the scheduler's copy
// (SetReq). Once the request is queued its caller may leave and reuse it:
// only the scheduler that holds the request in its queue reads it then.
func (p *Request) Req() *backendapi.InferRequest { return p.req }

// SetReq replaces the request with a scheduler's own copy (the sequence
// batcher adds the control inputs), before the request is queued.
func (p *Request) SetReq(req *backendapi.InferRequest) { p.req = req }

// Size is the request's batch size (1 without batching).
func (p *Request) Size() int64 { return p.size }

// Queued is when the request was queued.
func (p *Request) Queued() time.Time { return p.queued }

// Done is closed once the request has ended.
func (p *Request) Done() <-chan struct{} { return p.done }

// Filler reports whether the request is a sequence batcher's filler.
func (p *Request) Filler() bool { return p.filler }

// Streaming reports whether the request's responses go to a stream.
func (p *Request) Streaming() bool { return p.stream != nil }

// RunsNow marks a request that runs without waiting in a queue (an
// ensemble's): its compute time starts at its queue time.
func (p *Request) RunsNow() { p.started = p.queued }

// Durations are the request's total, queue and compute times as of now
// (a request no stub took spent all of its time queued).
func (p *Request) Durations(now time.Time) (total, queue, compute time.Duration) {
	started := p.started
	if started.IsZero() {
		started = now
	}
	return now.Sub(p.queued), started.Sub(p.queued), now.Sub(started)
}

// Abandon marks a request whose caller gave up: abandoned and cancelled,
// and the caller leaves (waiting for a copy of the inputs under way; none
// starts after). The caller then ends it (the model version's finish).
func (p *Request) Abandon() {
	p.mu.Lock()
	p.abandoned = true
	p.mu.Unlock()
	p.Cancel()
	p.leave()
}

// Solo returns the request's own one-request batch. A request is
// enqueued once, so the batch is used once.
func (p *Request) Solo() *Batch {
	p.soloItems[0] = p
	p.solo.Items = p.soloItems[:]
	return &p.solo
}

// Respond delivers one response. It reports whether the caller took the
// response (when not, the caller of respond releases it) and whether this
// call ended the request (true exactly once per request).
func (p *Request) Respond(resp *backendapi.InferResponse, err error, final bool) (taken, ended bool) {
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

// ClaimStats reports whether the response (err, final) about to be
// delivered ends the request and nobody recorded its statistics yet; true
// at most once per request.
func (p *Request) ClaimStats(err error, final bool) bool {
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
func (p *Request) assign(sp *Proc) {
	if p.runner.CompareAndSwap(nil, sp) {
		close(p.assigned)
	}
	if p.cancelled.Load() {
		p.tellStub(sp)
	}
}

// Cancel cancels the request: a queued one is dropped when its batch is
// formed, a running one is reported to its stub. The request still ends
// as usual (the model decides how it answers a cancelled request).
func (p *Request) Cancel() {
	if p.cancelled.Swap(true) {
		return
	}
	if sp := p.runner.Load(); sp != nil {
		p.tellStub(sp)
	}
}

// tellStub sends Cancel for the request to the stub that runs it, unless
// the request has already ended.
func (p *Request) tellStub(sp *Proc) {
	p.mu.Lock()
	ended := p.ended
	p.mu.Unlock()
	if ended || !sp.Alive() {
		return
	}
	sp.mu.Lock()
	handle := p.handle
	sp.mu.Unlock()
	if err := sp.conn.Send(&ipc.CancelMsg{Handle: handle}); err != nil && sp.Alive() {
		sp.log.Warn("send Cancel", "handle", handle, "error", err)
	}
}

// Await blocks until the request ends (true) or its context is done
// (false). Once a stub runs the request, the caller takes its turn reading
// that stub's ring (Proc.read), so it usually reads its own response
// itself instead of being woken by another goroutine that did.
func (p *Request) Await() bool {
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
			if sp.Alive() {
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
			sp.read(p.done, p.ctx.Done(), true, time.Time{})
		}
	}
}

// AwaitServing is Await for a BLS call served on the goroutine that read
// it from caller's ring (Proc.read): it returns ended once the request
// ended, false when its context is done, and stopped once stop closes
// first (the reader's own request gave up; the call goes on elsewhere).
// It reads the callee's ring itself as Await does, but in slices, between
// which it handles what queued up on caller's ring meanwhile (nobody else
// may be reading it). BLS calls met on the callee's ring go to goroutines
// of their own: this one is busy.
func (p *Request) AwaitServing(stop <-chan struct{}, caller *Proc) (ended, stopped bool) {
	var tick *time.Timer
	defer func() {
		if tick != nil {
			tick.Stop()
		}
	}()
	for {
		select {
		case <-p.done:
			return true, false
		default:
		}
		caller.DrainIfFree()
		assigned, lead := p.assigned, (chan struct{})(nil)
		sp := p.runner.Load()
		if sp != nil {
			assigned = nil
			if sp.Alive() {
				lead = sp.lead
			}
		}
		var slice <-chan time.Time
		if tick == nil {
			tick = time.NewTimer(readSlice)
		} else {
			tick.Reset(readSlice)
		}
		slice = tick.C
		select {
		case <-p.done:
			return true, false
		case <-p.ctx.Done():
			return false, false
		case <-stop:
			return false, true
		case <-assigned:
		case <-slice:
		case <-lead:
			sp.read(p.done, stop, false, time.Now().Add(readSlice))
		}
	}
}

// Wait blocks until the request ends or ctx is done.
func (p *Request) Wait() (*backendapi.InferResponse, error) {
	if p.Await() {
		return p.resp, p.err
	}
	p.mu.Lock()
	if p.ended {
		p.mu.Unlock()
		return p.resp, p.err
	}
	p.abandoned = true
	go p.Cancel()
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
func (p *Request) hold() bool {
	p.reqMu.Lock()
	if p.left {
		p.reqMu.Unlock()
		return false
	}
	return true
}

func (p *Request) unhold() { p.reqMu.Unlock() }

// leave is called by a caller that stops waiting: once it returns, the
// supervisor does not touch req any more (see reqMu).
func (p *Request) leave() {
	p.reqMu.Lock()
	p.left = true
	p.reqMu.Unlock()
}

// Gone reports whether nobody waits for the request any more.
func (p *Request) Gone() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ended || p.abandoned || p.cancelled.Load() || p.ctx.Err() != nil
}

// Batch is the unit handed to one execute call. A scheduler fills Items
// (and Requeue); the rest is the exchange's.
type Batch struct {
	Items []*Request
	// Requeue, set by a scheduler that can run a request again (iterative
	// sequences), takes each request the model released with RESCHEDULE.
	// Without it such a request fails.
	Requeue func(*Request)

	id   uint64
	sent time.Time
	// msg and msgReqs are where execute builds the Execute message of a
	// one-request batch, so that sending it allocates nothing.
	msg     ipc.ExecuteMsg
	msgReqs [1]ipc.Request
}

// onEnd registers f to run once the request has ended (right away when it
// already has).
func (pr *Request) setOnEnd(f func()) {
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

// TraceResponse records a response's timestamps in a traced request's
// Trace, before the response is delivered (the caller reads the Trace once
// the final one was).
func (p *Request) TraceResponse(final bool) {
	tr := p.trace
	if tr == nil {
		return
	}
	final = final || p.stream == nil
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended || p.abandoned {
		return // the caller may be reading the Trace already
	}
	tr.QueueStart = p.queued
	tr.ComputeStart = p.started
	if tr.ComputeOutputStart.IsZero() {
		tr.ComputeOutputStart = now
	}
	if final {
		tr.ComputeEnd = now
		tr.RequestEnd = now
	}
}
