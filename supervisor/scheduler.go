package supervisor

import (
	"github.com/stubvisor/stubvisor/backendapi/modelconfig"
	"github.com/stubvisor/stubvisor/supervisor/stubproc"
)

// pipelineDepth is how many Execute messages a stub may have queued: one
// running and the rest waiting in its ring, so the stub starts the next
// batch without waiting for the supervisor, which on a busy machine may be
// slow to get a CPU. Models with a batcher use batchPipelineDepth: a batch
// handed to a stub can no longer grow, so only one waits there while the
// batcher merges the requests that arrive meanwhile. A model with several
// instances pipelines only sequences (see newModelVersion).
const (
	pipelineDepth      = 4
	batchPipelineDepth = 2
)

// newScheduler picks the scheduler a model's config asks for: the
// sequence batcher, the dynamic batcher (also for a max_batch_size 0 model
// that takes several requests per execute: MAX_REQUESTS_PER_EXECUTE), or
// one execute per request.
//
// The batchers make the model queue unbuffered: a batch then changes hands
// only when a stub has a free pipeline slot, and until that moment the
// batcher may still add requests to it.
func newScheduler(mv *modelVersion) (scheduler, error) {
	switch {
	case mv.cfg.GetSequenceBatching() != nil:
		mv.queue = make(chan *stubproc.Batch)
		mv.pipelineDepth = batchPipelineDepth
		return newSequenceBatcher(mv, mv.cfg.GetSequenceBatching())
	case mv.cfg.GetDynamicBatching() != nil || modelconfig.RequestsPerExecute(mv.cfg) > 1:
		mv.queue = make(chan *stubproc.Batch)
		mv.pipelineDepth = batchPipelineDepth
		return newDynamicBatcher(mv, mv.cfg.GetDynamicBatching(), modelconfig.RequestsPerExecute(mv.cfg)), nil
	}
	return &defaultScheduler{mv: mv}, nil
}

// defaultScheduler gives every request its own execute call and lets the
// first free instance take it.
type defaultScheduler struct{ mv *modelVersion }

func (s *defaultScheduler) enqueue(pr *stubproc.Request) error {
	b := pr.Solo()
	if p := s.mv.freeStub(); p != nil {
		p.Execute(b)
		return nil
	}
	select {
	case s.mv.queue <- b:
		return nil
	case <-pr.Context().Done():
		return cancelledWhileQueued(s.mv, pr)
	}
}

func (s *defaultScheduler) stop() {}

// freeStub takes a pipeline slot of the instance with the most free ones,
// when no batch is queued before it, so the caller sends its request
// itself.
func (mv *modelVersion) freeStub() *stubproc.Proc {
	if len(mv.queue) > 0 {
		return nil
	}
	var best *stubproc.Proc
	for _, inst := range mv.instances {
		if p := inst.liveProc(); p != nil && (best == nil || p.FreeSlots() > best.FreeSlots()) {
			best = p
		}
	}
	if best == nil || !best.TakeSlot() {
		return nil
	}
	return best
}

// scheduler turns requests into batches on mv.queue or an instance's
// direct queue. The default hands each request to its own execute, as
// Triton's default scheduler does.
type scheduler interface {
	enqueue(pr *stubproc.Request) error
	stop()
}
