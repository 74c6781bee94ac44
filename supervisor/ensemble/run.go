package ensemble

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/supervisor/stubproc"
)

// An ensemble request runs each step as soon as every tensor it reads
// exists, through the same path as any request to the step's model, and
// steps that become ready together run in parallel.
//
// Tensors between steps never enter the Go heap: a step's outputs stay in
// its stub's arena (the response aliases them), and the next step's
// request names those bytes as its input, so the consumer's stub gets
// them in one copy, from the producer's arena into its own (mapping the
// producer's block into the consumer would save that copy but make every
// stub map every other's region; at 4 MiB the copy costs about what one
// extra page-fault pass of a mapping would). A response is released when
// no step reading its tensors is still running and none of them is an
// ensemble output; outputs reach the client aliasing the producers'
// arenas, released with the ensemble's response.

// ensRef counts the holders of one step response: the tensor table, each
// running step that reads one of its tensors, and an ensemble response.
type ensRef struct {
	resp *backendapi.InferResponse
	n    atomic.Int32
}

func (r *ensRef) hold() {
	if r != nil {
		r.n.Add(1)
	}
}

func (r *ensRef) drop() {
	if r != nil && r.n.Add(-1) == 0 {
		r.resp.Release()
	}
}

// ensVal is the current value of one ensemble tensor.
type ensVal struct {
	t   backendapi.InputTensor // Name is the ensemble tensor's
	src *ensRef                // nil for the ensemble's inputs
	// left counts the firings of consumer steps that have not ended yet.
	left  int
	fresh bool // not yet part of a streamed ensemble response
}

// ensEvent is what a running step reports: one response, an error, or its
// end (final).
type ensEvent struct {
	f     *ensFiring
	resp  *backendapi.InferResponse
	err   error
	final bool
}

// ensFiring is one run of a step with the values it read.
type ensFiring struct {
	st   *ensStep
	vals []*ensVal
}

// ensRun is one request through an ensemble. Only the goroutine that runs
// run touches vals; steps report through events.
type ensRun struct {
	e      *Ensemble
	pr     *stubproc.Request
	req    *backendapi.InferRequest
	ctx    context.Context
	cancel context.CancelFunc

	vals map[string]*ensVal
	// needed are the steps that lead to a requested output; wanted the
	// requested outputs (shared memory and classification included).
	needed  map[*ensStep]bool
	wanted  map[string]backendapi.RequestedOutput
	running int
	err     error

	mu     sync.Mutex
	events []ensEvent
	wake   chan struct{}

	start time.Time
	batch int64
}

// Enqueue implements sched.Scheduler: it runs the request through the
// ensemble on the caller's goroutine, without a queue of its own, and
// ends it through the host (a streaming request gets every response
// there). The request's compute time starts at its queue time.
func (e *Ensemble) Enqueue(pr *stubproc.Request) error {
	pr.RunsNow()
	pr.NotifyQueued()
	r := &ensRun{e: e, pr: pr, req: pr.Req(), vals: map[string]*ensVal{}, wake: make(chan struct{}, 1), start: time.Now(), batch: pr.Size()}
	r.ctx, r.cancel = context.WithCancel(pr.Context())
	defer r.cancel()
	r.plan()
	r.run()
	return nil
}

// plan picks the steps that lead to a requested output (all outputs when
// the request names none), as Triton prunes an ensemble's graph.
func (r *ensRun) plan() {
	e := r.e
	r.wanted = map[string]backendapi.RequestedOutput{}
	if len(r.req.Outputs) == 0 {
		for _, o := range e.outputs {
			r.wanted[o] = backendapi.RequestedOutput{Name: o}
		}
	}
	for _, o := range r.req.Outputs {
		r.wanted[o.Name] = o
	}
	r.needed = map[*ensStep]bool{}
	var visit func(tensor string)
	visit = func(tensor string) {
		st := e.producer[tensor]
		if st == nil || r.needed[st] {
			return
		}
		r.needed[st] = true
		for _, m := range st.in {
			visit(m.tensor)
		}
	}
	for o := range r.wanted {
		visit(o)
	}
}

// consumers counts the needed steps reading a tensor.
func (r *ensRun) consumers(tensor string) int {
	n := 0
	for _, st := range r.e.consumers[tensor] {
		if r.needed[st] {
			n++
		}
	}
	return n
}

// run drives the steps until every one has ended, then answers.
func (r *ensRun) run() {
	for _, in := range r.req.Inputs {
		r.vals[in.Name] = &ensVal{t: in, left: r.consumers(in.Name)}
	}
	var ready []*ensStep
	for _, st := range r.e.steps {
		if r.needed[st] && r.inputsReady(st) {
			ready = append(ready, st)
		}
	}
	r.fire(ready)
	for r.running > 0 {
		if !r.handleEvents() {
			<-r.wake
		}
	}
	r.handleEvents()
	r.finish()
}

// inputsReady reports whether every tensor a step reads has a value.
func (r *ensRun) inputsReady(st *ensStep) bool {
	for _, m := range st.in {
		if r.vals[m.tensor] == nil {
			return false
		}
	}
	return true
}

// fire starts the given steps. A lone step of a model that is not
// decoupled runs on this goroutine, which then reads the stub's ring
// itself (the common chain pays no goroutine hand-off); others run on
// their own goroutines.
func (r *ensRun) fire(steps []*ensStep) {
	if r.err != nil {
		return
	}
	for i, st := range steps {
		f := &ensFiring{st: st}
		req := r.stepRequest(f)
		r.running++
		m, err := r.e.models.Lookup(st.model, st.version)
		if err != nil {
			r.push(ensEvent{f: f, err: err, final: true})
			continue
		}
		if i == len(steps)-1 && r.running == 1 && !m.Decoupled() {
			r.runStep(m, f, req)
			continue
		}
		go r.runStep(m, f, req)
	}
}

// stepRequest builds the request of one firing: the ensemble request's
// parameters, correlation id, flags, priority and timeout, the step's
// inputs from the tensor table (each value held until the firing ends)
// and, as requested outputs, the step outputs something still needs.
func (r *ensRun) stepRequest(f *ensFiring) *backendapi.InferRequest {
	st := f.st
	req := &backendapi.InferRequest{
		ModelName: st.model, ModelVersion: st.version, ID: r.req.ID, Parameters: r.req.Parameters,
		CorrelationID: r.req.CorrelationID, Flags: r.req.Flags, Priority: r.req.Priority, Timeout: r.req.Timeout,
		Inputs: make([]backendapi.InputTensor, 0, len(st.in)),
	}
	if tr := r.req.Trace; tr != nil && tr.Child != nil {
		// A traced ensemble's steps are traces of their own under it.
		req.Trace = tr.Child(st.model, st.version, time.Time{})
	}
	for _, m := range st.in {
		v := r.vals[m.tensor]
		v.src.hold()
		f.vals = append(f.vals, v)
		in := v.t
		in.Name = m.model
		req.Inputs = append(req.Inputs, in)
	}
	for _, m := range st.out {
		want, isOut := r.wanted[m.tensor]
		if !isOut && r.consumers(m.tensor) == 0 {
			continue
		}
		o := backendapi.RequestedOutput{Name: m.model}
		if isOut {
			o.SharedMemory = want.SharedMemory
			if r.consumers(m.tensor) == 0 {
				o.Classification = want.Classification
			}
		}
		req.Outputs = append(req.Outputs, o)
	}
	return req
}

// runStep runs one firing to its end, reporting every response.
func (r *ensRun) runStep(m Model, f *ensFiring, req *backendapi.InferRequest) {
	if req.Trace != nil && req.Trace.End != nil {
		defer req.Trace.End()
	}
	report := func(resp *backendapi.InferResponse, err error, final bool) {
		r.push(ensEvent{f: f, resp: resp, err: err, final: final})
	}
	pr, err := m.Submit(r.ctx, req, report)
	if err != nil {
		report(nil, err, true)
		return
	}
	if !pr.Await() {
		// The final event drops this firing's hold on the producers'
		// responses; a stub may be copying the step's inputs out of their
		// blocks right now (prepare, under pr.hold): abandon leaves first,
		// which waits for that copy to end, and no later one starts.
		m.Abandon(pr, backendapi.Errorf(backendapi.Cancelled, "request for model '%s' cancelled: %v", f.st.model, r.ctx.Err()))
	}
}

func (r *ensRun) push(ev ensEvent) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// handleEvents acts on the events reported so far; false when there were
// none.
func (r *ensRun) handleEvents() bool {
	r.mu.Lock()
	evs := r.events
	r.events = nil
	r.mu.Unlock()
	for _, ev := range evs {
		r.handle(ev)
	}
	return len(evs) > 0
}

func (r *ensRun) handle(ev ensEvent) {
	if ev.err != nil && r.err == nil {
		// The first error ends the request; the other steps are
		// cancelled and their responses dropped.
		r.err = backendapi.Wrapf(ev.err, backendapi.CodeOf(ev.err), "in ensemble '%s', %s", r.e.name, backendapi.MessageOf(ev.err))
		r.cancel()
	}
	if ev.resp != nil {
		r.store(ev.f.st, ev.resp)
	}
	if !ev.final {
		return
	}
	r.running--
	for _, v := range ev.f.vals {
		v.src.drop()
		v.left--
		if v.left == 0 && r.vals[v.t.Name] == v && r.wanted[v.t.Name].Name == "" {
			delete(r.vals, v.t.Name)
			v.src.drop()
		}
	}
}

// store enters a step response's outputs into the tensor table, starts
// the steps that now have all their inputs and, for a decoupled ensemble,
// sends a response when every requested output has a value and one is
// new.
func (r *ensRun) store(st *ensStep, resp *backendapi.InferResponse) {
	ref := &ensRef{resp: resp}
	ref.hold() // until store returns
	defer ref.drop()
	if r.err != nil {
		return
	}
	var ready []*ensStep
	fresh := false
	for _, o := range resp.Outputs {
		tensor, ok := st.tensorOf(o.Name)
		if !ok {
			continue
		}
		_, isOut := r.wanted[tensor]
		n := r.consumers(tensor)
		if !isOut && n == 0 {
			continue
		}
		if old := r.vals[tensor]; old != nil {
			old.src.drop()
		}
		ref.hold()
		r.vals[tensor] = &ensVal{
			t:   backendapi.InputTensor{Name: tensor, DataType: o.DataType, Shape: o.Shape, Data: o.Data, SharedMemory: o.SharedMemory},
			src: ref, left: n, fresh: isOut,
		}
		fresh = fresh || isOut
		for _, c := range r.e.consumers[tensor] {
			if r.needed[c] && r.inputsReady(c) && !containsStep(ready, c) {
				ready = append(ready, c)
			}
		}
	}
	r.fire(ready)
	if fresh && r.e.decoupled && r.pr.Streaming() {
		if out := r.response(true); out != nil {
			r.e.host.End(r.pr, out, nil, false) // which releases it
		}
	}
}

func containsStep(steps []*ensStep, st *ensStep) bool {
	for _, s := range steps {
		if s == st {
			return true
		}
	}
	return false
}

// response builds an ensemble response from the requested outputs'
// values, holding each until the response is released; nil when one has
// no value (or, with onlyFresh, one was already sent: a streamed response
// pairs only values that arrived since the last, so a decoupled step's
// outputs are never mixed with an older response's).
func (r *ensRun) response(onlyFresh bool) *backendapi.InferResponse {
	resp := &backendapi.InferResponse{ModelName: r.e.name, ModelVersion: r.e.version, ID: r.req.ID}
	for _, name := range r.e.outputs {
		want, ok := r.wanted[name]
		if !ok {
			continue
		}
		v := r.vals[name]
		if v == nil || onlyFresh && !v.fresh {
			return nil
		}
		resp.Outputs = append(resp.Outputs, backendapi.OutputTensor{Name: name, DataType: v.t.DataType, Shape: v.t.Shape, Data: v.t.Data, SharedMemory: want.SharedMemory})
	}
	var refs []*ensRef
	for _, name := range r.e.outputs {
		if v := r.vals[name]; v != nil && r.wanted[name].Name != "" {
			v.fresh = false
			v.src.hold()
			refs = append(refs, v.src)
		}
	}
	resp.SetRelease(func() {
		for _, ref := range refs {
			ref.drop()
		}
	})
	return resp
}

// finish answers once every step has ended and lets go of the table.
func (r *ensRun) finish() {
	var out *backendapi.InferResponse
	err := r.err
	if err == nil && !r.e.decoupled {
		if out = r.response(false); out == nil {
			err = backendapi.Errorf(backendapi.Internal, "in ensemble '%s', the steps ended without producing every requested output", r.e.name)
		}
	}
	for name, v := range r.vals {
		delete(r.vals, name)
		v.src.drop()
	}
	// The execution is counted before the caller hears of the end; the
	// request's statistics are recorded by End, before it answers.
	r.e.host.Executed(r.batch, time.Since(r.start))
	// A response the caller does not take is released by End.
	r.e.host.End(r.pr, out, err, true)
}
