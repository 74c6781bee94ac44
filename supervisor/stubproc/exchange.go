package stubproc

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc"
)

// callReply is where a control call's Result lands.
type callReply struct {
	res  *ipc.ResultMsg
	done chan struct{}
}

// call sends a control message and waits for its Result, the process's
// death, or the timeout (0: none beyond death), reading the ring while it
// waits.
func (p *Proc) Call(build func(id uint64) ipc.Message, timeout time.Duration) (*ipc.ResultMsg, error) {
	c := &callReply{done: make(chan struct{})}
	p.mu.Lock()
	p.nextID++
	id := p.nextID
	p.calls[id] = c
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.calls, id)
		p.mu.Unlock()
	}()
	if err := p.conn.Send(build(id)); err != nil {
		return nil, p.deathError(err)
	}
	ctx := context.Background()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	for {
		select {
		case <-c.done:
			return c.res, nil
		case <-p.exited:
			return nil, p.deathError(ErrStubExited)
		case <-ctx.Done():
			return nil, fmt.Errorf("stub %s: no reply within %s", p.cfg.Instance, timeout)
		case <-p.lead:
			p.read(c.done, ctx.Done(), false, time.Time{})
		}
	}
}

// failAll fails every request the dead stub held. The stub executes
// batches one at a time in the order they were sent, so of the batches it
// had not finished only the first had started: the requests of the others
// are told they did not run.
func (p *Proc) failAll() {
	p.mu.Lock()
	reqs := p.requests
	var first uint64
	for id := range p.batches {
		if first == 0 || id < first {
			first = id
		}
	}
	unstarted := map[*Request]bool{}
	for id, b := range p.batches {
		if id != first {
			for _, pr := range b.Items {
				unstarted[pr] = !pr.execDone
			}
		}
	}
	p.requests = map[uint64]*Request{}
	spare.done(len(p.batches))
	p.batches = map[uint64]*Batch{}
	p.failed = true
	p.mu.Unlock()
	died, notRun := p.failure(), p.notStarted()
	for _, r := range reqs {
		p.unholdStaged(r) // the stub reads it no more
		if unstarted[r] {
			p.host.Finish(r, nil, notRun, true)
		} else {
			p.host.Finish(r, nil, died, true)
		}
	}
}

// next uses the pipeline slot an execute just freed: it sends the next
// queued batch from the calling reader, or returns the slot to the
// dispatcher when nothing waits. (A reader that sends could in principle
// block on a full ring while the stub blocks on ours; the rings hold far
// more than the pipeline's few small Execute messages.)
func (p *Proc) next() {
	if p.cfg.Gate != nil {
		// Waiting for the gate is the dispatcher's job, never a reader's.
		p.slots <- struct{}{}
		return
	}
	select {
	case b := <-p.direct:
		p.Execute(b)
	case b := <-p.queue:
		p.Execute(b)
	default:
		p.slots <- struct{}{}
	}
}

// FreeSlots is how many more Execute messages the stub may be sent now.
func (p *Proc) FreeSlots() int { return len(p.slots) }

// TakeSlot takes a free pipeline slot without waiting, for a caller that
// sends its own request (no hand-off to the dispatcher).
func (p *Proc) TakeSlot() bool {
	if p.Retired() {
		return false
	}
	select {
	case <-p.slots:
		return true
	default:
		return false
	}
}

// Dispatch feeds the stub from the model's queues while it lives.
func (p *Proc) Dispatch() {
	if p.cfg.Gate != nil {
		p.gatedDispatch()
		return
	}
	for {
		select {
		case <-p.slots:
		case <-p.exited:
			return
		case <-p.retired:
			return
		}
		b := p.nextBatch()
		if b == nil {
			return
		}
		p.Execute(b)
	}
}

// nextBatch waits for a batch, from the instance's direct channel or the
// model's queue; nil once the stub exited or was retired.
func (p *Proc) nextBatch() *Batch {
	select {
	case b := <-p.direct:
		return b
	case b := <-p.queue:
		return b
	case <-p.exited:
		return nil
	case <-p.retired:
		return nil
	}
}

// Execute places a batch's inputs (prepare) and sends it.
func (p *Proc) Execute(b *Batch) {
	var reqs []ipc.Request
	if len(b.Items) <= len(b.msgReqs) {
		reqs = b.msgReqs[:0]
	} else {
		reqs = make([]ipc.Request, 0, len(b.Items))
	}
	// While no request drops out, live is the list as handed over; after
	// that a new slice, because the batchers still read their list.
	live := b.Items
	dropped := false
	drop := func(i int) {
		if !dropped {
			dropped = true
			live = append(make([]*Request, 0, len(b.Items)-1), b.Items[:i]...)
		}
	}
	now := time.Now()
	// The bytes the message may carry inline: a quarter of a frame, so a
	// large batch of small inputs never makes it too large to send.
	inlineRoom := p.conn.MaxFrame() / 4
	for i, pr := range b.Items {
		if pr.Gone() || !pr.hold() {
			drop(i)
			p.host.Finish(pr, nil, backendapi.Errorf(backendapi.Cancelled, "request for model '%s' was cancelled while queued", p.cfg.Model), true)
			continue
		}
		r, err := p.prepare(pr, &inlineRoom)
		if err == nil {
			// Under the hold: a caller that gives up leaves (waiting for
			// the hold) before it finishes the request and reads started.
			pr.started = now
		}
		pr.unhold()
		if err != nil {
			drop(i)
			p.host.Finish(pr, nil, err, true)
			continue
		}
		reqs = append(reqs, r)
		if dropped {
			live = append(live, pr)
		}
	}
	if len(live) == 0 {
		p.slots <- struct{}{}
		return
	}
	b.Items = live
	spare.grant(p, p.cfg.IPC.Spin, now)
	// Batch ids follow the order of the ring (failAll relies on it).
	p.sendMu.Lock()
	p.mu.Lock()
	if p.failed {
		p.mu.Unlock()
		p.sendMu.Unlock()
		for _, pr := range live {
			p.unholdStaged(pr)
			p.host.Finish(pr, nil, p.notStarted(), true)
		}
		return
	}
	p.nextID++
	b.id = p.nextID
	b.sent = now
	p.batches[b.id] = b
	spare.sent()
	for _, pr := range live {
		p.requests[pr.handle] = pr
	}
	if p.execSince.IsZero() {
		p.execSince = now
	}
	p.mu.Unlock()
	p.kickWatch()
	for _, pr := range live {
		pr.assign(p)
	}
	// The message lives in the batch (Send encodes it), then lets go.
	b.msg = ipc.ExecuteMsg{BatchID: b.id, Requests: reqs}
	p.sentSince.Store(true)
	err := p.conn.Send(&b.msg)
	b.msg = ipc.ExecuteMsg{}
	clear(reqs)
	p.sent += uint64(len(live))
	full := p.cfg.MaxRequests > 0 && p.sent >= p.cfg.MaxRequests
	sent := p.sent
	p.sendMu.Unlock()
	if full && !p.Retired() {
		p.Retire()
		p.host.Recycle(p, fmt.Sprintf("recycled: %d requests >= MAX_REQUESTS_PER_STUB %d", sent, p.cfg.MaxRequests))
	}
	if err != nil {
		// The receiver fails the batch once the death is confirmed; a
		// live stub whose ring refuses us is broken.
		if p.Alive() {
			p.Kill("send failed: " + err.Error())
		}
	}
}

// prepare assigns a handle and copies the request's inputs into the arena,
// or, for those of at most ipc.InlineMax bytes, into the message while
// *inlineRoom (which it decreases) holds all of the request's.
func (p *Proc) prepare(pr *Request, inlineRoom *int) (ipc.Request, error) {
	req := pr.req
	if !p.Alive() {
		return ipc.Request{}, p.notStarted()
	}
	p.mu.Lock()
	p.nextID++
	pr.handle = p.nextID
	p.mu.Unlock()
	r := ipc.Request{
		Handle: pr.handle, ID: req.ID, Flags: req.Flags,
		Inputs:        make([]ipc.Tensor, 0, len(req.Inputs)),
		TimeoutMicros: uint64(req.Timeout / time.Microsecond),
	}
	if req.Trace != nil {
		r.TraceContext = req.Trace.Context
	}
	if req.CorrelationID.IsText {
		r.CorrelationID = req.CorrelationID.String
	} else {
		r.CorrelationID = req.CorrelationID.Uint
	}
	pr.inputs = pr.inputs[:0]
	var inline []byte // the bytes of the LocInline inputs, one allocation
	inlined := false
	if n := inlineBytes(req.Inputs); n > 0 && n <= *inlineRoom {
		*inlineRoom -= n
		inline = make([]byte, 0, n)
		inlined = true
	}
	for i := range req.Inputs {
		in := &req.Inputs[i]
		if in.SharedMemory != nil {
			r.Inputs = append(r.Inputs, ipc.Tensor{}) // clientTensors fills it
			continue
		}
		data, err := inputBytes(in)
		if err != nil {
			p.freeRequestInputs(pr)
			return r, err
		}
		t := ipc.Tensor{Name: in.Name, DataType: uint8(in.DataType), Shape: slices.Clone(in.Shape), Loc: ipc.LocArena0, Size: uint64(len(data))}
		if inlined && len(data) > 0 && len(data) <= ipc.InlineMax {
			// A small input travels in the message: no block to allocate,
			// view and free. Its bytes are copied here, under the hold:
			// the message is sent after the caller may have left.
			start := len(inline)
			inline = append(inline, data...) // within its capacity: earlier slices stay valid
			t.Loc, t.Data = ipc.LocInline, inline[start:len(inline):len(inline)]
		} else if off, ok := p.stagedInput(pr, data); ok {
			t.Offset = off // read from the socket into this arena: no copy
		} else if len(data) > 0 {
			off, buf, err := p.conn.Alloc(uint64(len(data)))
			if err != nil {
				p.freeRequestInputs(pr)
				return r, backendapi.Errorf(backendapi.Unavailable, "model '%s' instance '%s': no room for input '%s': %v", p.cfg.Model, p.cfg.Instance, in.Name, err)
			}
			copy(buf, data)
			t.Offset = off
			pr.inputs = append(pr.inputs, off)
		}
		r.Inputs = append(r.Inputs, t)
	}
	for _, o := range req.Outputs {
		r.RequestedOutputs = append(r.RequestedOutputs, o.Name)
	}
	if len(req.Parameters) > 0 {
		r.ParametersJSON = parametersJSON(req.Parameters)
	} else {
		r.ParametersJSON = "{}"
	}
	if held, err := p.clientTensors(pr, &r); err != nil {
		p.freeRequestInputs(pr)
		return r, err
	} else if len(held) > 0 {
		pr.setOnEnd(func() { p.cfg.Regions.Release(held) })
	}
	return r, nil
}

// inlineBytes is the size of the inputs prepare sends in the message.
func inlineBytes(inputs []backendapi.InputTensor) int {
	n := 0
	for i := range inputs {
		if k := len(inputs[i].Data); inputs[i].SharedMemory == nil && k > 0 && k <= ipc.InlineMax {
			n += k
		}
	}
	return n
}

// freeOwn frees blocks of the supervisor's arena.
func (p *Proc) freeOwn(offs []uint64) {
	for _, off := range offs {
		if err := p.conn.Free(off); err != nil && p.Alive() {
			p.log.Warn("free input block", "offset", off, "error", err)
		}
	}
}

// freeInputs frees a request's input blocks unless its response holds
// them (Request.inputsHeld).
func (p *Proc) freeInputs(pr *Request) {
	p.mu.Lock()
	held := pr.inputsHeld
	p.mu.Unlock()
	if !held {
		p.freeRequestInputs(pr)
	}
}

// executeDone handles the end of one execute call.
func (p *Proc) executeDone(m *ipc.ExecuteDoneMsg) {
	now := time.Now()
	p.mu.Lock()
	b := p.batches[m.BatchID]
	if b != nil {
		spare.done(1)
	}
	delete(p.batches, m.BatchID)
	if len(p.batches) == 0 {
		p.execSince = time.Time{}
	} else {
		p.execSince = now
	}
	p.mu.Unlock()
	if b == nil {
		p.log.Warn("ExecuteDone for an unknown batch", "batch", m.BatchID)
		return
	}
	// The execution is counted before its responses go out, so a client
	// (or an ensemble) reading statistics after its response sees it.
	var size int64
	for _, pr := range b.Items {
		size += pr.size
	}
	p.host.Executed(size, now.Sub(b.sent))
	for i := range m.Responses {
		p.deliver(&m.Responses[i])
	}
	p.next()
	var execErr error
	if m.Error != nil {
		execErr = backendapi.Errorf(backendapi.Code(m.Error.Code), "%s", m.Error.Message)
	} else {
		p.mu.Lock()
		p.okExecs++
		p.mu.Unlock()
	}
	for _, pr := range b.Items {
		p.mu.Lock()
		pr.execDone = true
		// A filler has no caller waiting for more: it ends here.
		ended := pr.final || pr.filler
		again := !ended && execErr == nil && slices.Contains(m.Rescheduled, pr.handle)
		if ended || again {
			delete(p.requests, pr.handle)
		}
		if again {
			pr.execDone = false // it runs again, under a new handle
		}
		p.mu.Unlock()
		if ended || again {
			p.freeInputs(pr)
		}
		switch {
		case pr.filler:
			p.host.Finish(pr, nil, nil, true)
			continue
		case ended:
			continue
		case again && b.Requeue != nil:
			b.Requeue(pr)
			continue
		case again:
			p.host.Finish(pr, nil, backendapi.Errorf(backendapi.InvalidArg, msgRescheduleRefused), true)
			continue
		}
		if execErr == nil && slices.Contains(m.Open, pr.handle) {
			continue // its response sender answers later (deliver ends it)
		}
		if execErr != nil || !p.cfg.Decoupled {
			err := execErr
			if err == nil {
				err = backendapi.Errorf(backendapi.Internal, "model '%s' returned no response for the request", p.cfg.Model)
			}
			p.mu.Lock()
			delete(p.requests, pr.handle)
			p.mu.Unlock()
			p.freeInputs(pr)
			p.host.Finish(pr, nil, err, true)
		}
	}
}

// msgRescheduleRefused is Triton's text for a request the model released
// with RESCHEDULE when its scheduler cannot run it again: only iterative
// sequences can.
const msgRescheduleRefused = "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured to handle such a flag."

// deliver hands one response to its request.
func (p *Proc) deliver(r *ipc.Response) {
	p.mu.Lock()
	pr := p.requests[r.Handle]
	final := r.Flags&ipc.FlagFinal != 0 || !p.cfg.Decoupled
	free := false
	if pr != nil && final {
		pr.final = true
		if pr.execDone {
			delete(p.requests, r.Handle)
			free = true
		}
	}
	p.mu.Unlock()
	var sr *stubResponse
	var offs []uint64
	if pr != nil {
		sr = new(stubResponse)
		offs = sr.offBuf[:0]
	}
	for _, t := range r.Outputs {
		if t.Loc == ipc.LocArena1 && t.Size > 0 {
			offs = append(offs, t.Offset)
		}
	}
	if pr == nil {
		p.Release(offs)
		return
	}
	resp, err := p.response(sr, pr, r, offs, final)
	if free {
		p.freeInputs(pr)
	}
	p.host.Finish(pr, resp, err, final)
}

// Busy reports whether the stub has work outstanding.
func (p *Proc) Busy() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.batches) > 0
}

// InFlight is the number of requests the stub holds.
func (p *Proc) InFlight() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.requests)
}

// ResultError turns a stub's Result error into a Go error.
func ResultError(e *ipc.Error) error {
	if e == nil {
		return nil
	}
	return backendapi.Errorf(backendapi.Code(e.Code), "%s", strings.TrimSpace(e.Message))
}

// Release tells the stub it may reuse output blocks.
func (p *Proc) Release(offs []uint64) {
	if len(offs) == 0 || !p.Alive() {
		return
	}
	if err := p.conn.Send(&ipc.ReleaseMsg{Offsets: offs}); err != nil && p.Alive() {
		p.log.Warn("release output blocks", "error", err)
	}
}

// releaseLater is release for outputs a front end is done with. While the
// stub has work queued, blocks are handed back in batches (releaseBatch
// blocks or releaseBatchBytes, or at the next watchdog tick), which spares
// the stub a message per request; an idle stub gets them at once.
func (p *Proc) releaseLater(offs []uint64, bytes uint64) {
	p.relMu.Lock()
	p.relOffs = append(p.relOffs, offs...)
	p.relBytes += bytes
	flush := len(p.relOffs) >= releaseBatch || p.relBytes >= releaseBatchBytes || !p.Busy()
	p.relMu.Unlock()
	if flush {
		p.flushReleases()
	}
}

// flushReleases sends the blocks releaseLater held back.
func (p *Proc) flushReleases() {
	p.relMu.Lock()
	offs := p.relOffs
	p.relOffs, p.relBytes = nil, 0
	p.relMu.Unlock()
	if len(offs) == 0 {
		return
	}
	p.Release(offs)
	// Send has encoded the list: it can take the next blocks, unless
	// others started a new one meanwhile.
	if cap(offs) <= 2*releaseBatch {
		p.relMu.Lock()
		if p.relOffs == nil {
			p.relOffs = offs[:0]
		}
		p.relMu.Unlock()
	}
}

const (
	releaseBatch      = 32
	releaseBatchBytes = 1 << 20
)

// inputBytes returns the bytes of a request input held in memory. Inputs
// in client regions never come here: prepare sends them as LocClient
// descriptors (clientTensors).
func inputBytes(in *backendapi.InputTensor) ([]byte, error) {
	if in.SharedMemory != nil {
		return nil, backendapi.Errorf(backendapi.NotFound, "Unable to find shared memory region: '%s'", in.SharedMemory.Region)
	}
	return in.Data, nil
}
