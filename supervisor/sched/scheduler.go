package sched

import (
	"github.com/hashicorp/go-hclog"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/backendapi/modelconfig"
	"github.com/stubvisor/stubvisor/supervisor/stubproc"
)

// Scheduler turns a model's requests into batches for its stubs, as
// Triton's schedulers do behind one interface. The ensemble implements it
// too (package ensemble), so every caller submits the same way.
type Scheduler interface {
	// Enqueue takes a validated request; an error refuses it (nothing
	// was queued). Otherwise the request ends through Dispatch.Finish.
	Enqueue(pr *stubproc.Request) error
	// FailQueued fails every request still waiting with err (no stub can
	// run them).
	FailQueued(err error)
	// Ready reports whether the scheduler can serve now: an instance of
	// the model has a live stub.
	Ready() bool
	// Stop ends the scheduler; requests still waiting fail, as the model
	// is going away. It is idempotent.
	Stop()
}

// Dispatch is what a scheduler needs from its model: a stub that takes a
// batch now, the model's queue, each instance's direct queue, and finish.
type Dispatch interface {
	// Take reserves a pipeline slot on the stub with the most free ones,
	// when no batch waits in Queue before it; nil when no stub has room.
	Take() Runner
	// Queue holds the batches any instance may take (NewQueue).
	Queue() chan *stubproc.Batch
	// Instances are the model's instances, in config order.
	Instances() []Instance
	// Finish hands a request a response or ends it (final).
	Finish(pr *stubproc.Request, resp *backendapi.InferResponse, err error, final bool)
}

// Runner runs a batch on a stub whose pipeline slot Take reserved for it.
type Runner interface{ Execute(b *stubproc.Batch) }

// Instance is one model instance as the sequence batcher sees it: a lane
// whose stub keeps its sequences' state.
type Instance interface {
	Name() string
	// Ready reports whether the instance has a live stub.
	Ready() bool
	// Proc is the instance's current stub, nil while it restarts.
	Proc() *stubproc.Proc
	// Direct carries the batches that must run on this instance.
	Direct() chan *stubproc.Batch
}

// Model names the model version a scheduler serves.
type Model struct {
	Name    string
	Version int64
	Config  *inferencepb.ModelConfig
	Log     hclog.Logger
}

// model is what each scheduler keeps of its model.
type model struct {
	name          string
	version       int64
	maxBatch      int64 // max_batch_size
	pipelineDepth int   // PipelineDepth of the model
	queue         chan *stubproc.Batch
	instances     []Instance
	log           hclog.Logger
	d             Dispatch
}

func (m *model) finish(pr *stubproc.Request, resp *backendapi.InferResponse, err error, final bool) {
	m.d.Finish(pr, resp, err, final)
}

// pipelineDepth is how many Execute messages a stub may have queued: one
// running and the rest waiting in its ring, so the stub starts the next
// batch without waiting for the supervisor, which on a busy machine may be
// slow to get a CPU. Models with a batcher use batchPipelineDepth: a batch
// handed to a stub can no longer grow, so only one waits there while the
// batcher merges the requests that arrive meanwhile. A model with several
// instances pipelines only sequences (sharedPipelineDepth).
const (
	pipelineDepth       = 4
	batchPipelineDepth  = 2
	sharedPipelineDepth = 1
)

// PipelineDepth is the one rule for how many executes a stub of a model
// with cfg and that many instances may have queued. With several
// instances, a request any instance may run waits in the model's queue for
// the first instance to free, never in the ring of a busy stub, where a
// slow or hung execute would hold it while another instance idles.
// (Sequences are bound to their instance anyway.)
func PipelineDepth(cfg *inferencepb.ModelConfig, instances int) int {
	switch {
	case cfg.GetSequenceBatching() != nil:
		return batchPipelineDepth
	case instances > 1:
		return sharedPipelineDepth
	case batches(cfg):
		return batchPipelineDepth
	}
	return pipelineDepth
}

// batches reports whether cfg asks for a batcher: the sequence batcher,
// the dynamic batcher, or (max_batch_size 0) several requests per execute.
func batches(cfg *inferencepb.ModelConfig) bool {
	return cfg.GetSequenceBatching() != nil || cfg.GetDynamicBatching() != nil || modelconfig.RequestsPerExecute(cfg) > 1
}

// NewQueue makes the model queue for cfg. The batchers make it
// unbuffered: a batch then changes hands only when a stub has a free
// pipeline slot, and until that moment the batcher may still add requests
// to it.
func NewQueue(cfg *inferencepb.ModelConfig) chan *stubproc.Batch {
	if batches(cfg) {
		return make(chan *stubproc.Batch)
	}
	return make(chan *stubproc.Batch, 1024)
}

// New picks the scheduler a model's config asks for: the sequence
// batcher, the dynamic batcher (also for a max_batch_size 0 model that
// takes several requests per execute: MAX_REQUESTS_PER_EXECUTE), or one
// execute per request.
func New(m Model, d Dispatch) (Scheduler, error) {
	cfg, instances := m.Config, d.Instances()
	mv := &model{
		name: m.Name, version: m.Version, maxBatch: int64(cfg.GetMaxBatchSize()),
		pipelineDepth: PipelineDepth(cfg, len(instances)),
		queue:         d.Queue(), instances: instances, log: m.Log, d: d,
	}
	switch {
	case cfg.GetSequenceBatching() != nil:
		return newSequenceBatcher(mv, cfg.GetSequenceBatching())
	case batches(cfg):
		return newDynamicBatcher(mv, cfg.GetDynamicBatching(), modelconfig.RequestsPerExecute(cfg)), nil
	}
	return &defaultScheduler{mv: mv}, nil
}

// defaultScheduler gives every request its own execute call and lets the
// first free instance take it, as Triton's default scheduler does.
type defaultScheduler struct{ mv *model }

func (s *defaultScheduler) Enqueue(pr *stubproc.Request) error {
	b := pr.Solo()
	if r := s.mv.d.Take(); r != nil {
		r.Execute(b)
		return nil
	}
	select {
	case s.mv.queue <- b:
		return nil
	case <-pr.Context().Done():
		return backendapi.Errorf(backendapi.Cancelled, "request for model '%s' cancelled while queued: %v", s.mv.name, pr.Context().Err())
	}
}

func (s *defaultScheduler) FailQueued(err error) { s.mv.drainQueue(err) }

func (s *defaultScheduler) Ready() bool { return s.mv.ready() }

func (s *defaultScheduler) Stop() {}

// ready reports whether an instance of the model has a live stub.
func (m *model) ready() bool {
	for _, inst := range m.instances {
		if inst.Ready() {
			return true
		}
	}
	return false
}

// drainQueue fails the batches waiting in the model queue.
func (m *model) drainQueue(err error) {
	for {
		select {
		case b := <-m.queue:
			for _, pr := range b.Items {
				m.finish(pr, nil, err, true)
			}
		default:
			return
		}
	}
}

// unloaded is the error of a request whose model went away before it ran.
func (m *model) unloaded() error {
	return backendapi.Errorf(backendapi.Unavailable, "model '%s' was unloaded before the request ran", m.name)
}
