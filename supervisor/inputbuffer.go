package supervisor

import (
	"context"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/supervisor/stubproc"
)

var _ backendapi.InputBuffers = (*Supervisor)(nil)

// InputBuffer implements backendapi.InputBuffers: a block of the arena of
// the stub the request will most likely run on, the one Take would pick
// now (the live stub with the most free pipeline slots). A request that
// runs elsewhere has its inputs copied from the block as from any memory.
// Ensembles and models without a live stub get none.
func (s *Supervisor) InputBuffer(_ context.Context, model string, version int64, n int) *backendapi.InputBuffer {
	mv, err := s.lookup(model, version)
	if err != nil || n <= 0 {
		return nil
	}
	var best *stubproc.Proc
	for _, inst := range mv.instances {
		if p := inst.liveProc(); p != nil && (best == nil || p.FreeSlots() > best.FreeSlots()) {
			best = p
		}
	}
	if best == nil {
		return nil
	}
	return best.StageInputs(n)
}
