package stubproc

import (
	"context"
	"sync/atomic"

	"github.com/stubvisor/stubvisor/backendapi"
)

// This file is the stub's side of Config.Gate (the rate limiter): the
// dispatcher waits for the gate before it sends a batch, and the batch
// gives the grant back when its execute ends or the stub dies.

// admit waits for the gate's grant for b, for as long as somebody waits
// for one of b's requests and the stub lives. Without a grant it ends b's
// requests (cancelled, or not run when the stub died) and gives back the
// pipeline slot the dispatcher took for b.
func (p *Proc) admit(b *Batch) bool {
	ctx, cancel := p.batchContext(b)
	release, err := p.cfg.Gate(ctx)
	cancel()
	if err == nil {
		b.release = release
		return true
	}
	why := backendapi.Errorf(backendapi.Cancelled, "request for model '%s' was cancelled while queued", p.cfg.Model)
	select {
	case <-p.exited:
		why = p.notStarted()
	default:
	}
	for _, pr := range b.Items {
		p.host.Finish(pr, nil, why, true)
	}
	p.slots <- struct{}{}
	return false
}

// batchContext is done once the stub has exited or every request of b
// that has a caller has ended its context (fillers have none: a batch of
// fillers only waits for the stub).
func (p *Proc) batchContext(b *Batch) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(p.life)
	var callers atomic.Int32
	for _, pr := range b.Items {
		if !pr.filler {
			callers.Add(1)
		}
	}
	if callers.Load() == 0 {
		return ctx, cancel
	}
	stops := make([]func() bool, 0, len(b.Items))
	for _, pr := range b.Items {
		if !pr.filler {
			stops = append(stops, context.AfterFunc(pr.ctx, func() {
				if callers.Add(-1) == 0 {
					cancel()
				}
			}))
		}
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// ungate gives back the grant b holds, if any: its execute ended, never
// started, or its stub died.
func (b *Batch) ungate() {
	if r := b.release; r != nil {
		b.release = nil
		r()
	}
}
