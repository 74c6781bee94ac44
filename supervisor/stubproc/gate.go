package stubproc

import (
	"context"
	"sync/atomic"

	"github.com/stubvisor/stubvisor/backendapi"
)

// This file is the stub's side of Config.Gate (the rate limiter). The
// stub's pipeline is one execute deep, and its dispatcher alone sends:
// it takes a batch, waits for the grant, sends the batch, and holds the
// grant until the execute's slot comes back (the execute ended, or its
// requests were all dropped) or the stub exits. With another batch
// already queued it renews the grant in the same step; otherwise it gives
// it back before waiting for work.

// gatedDispatch is Dispatch behind a gate.
func (p *Proc) gatedDispatch() {
	var held Grant
	defer func() {
		if held != nil {
			held.Release()
		}
	}()
	for {
		// The slot comes back when the execute in flight ended; a retired
		// stub still finishes it before the grant goes back.
		select {
		case <-p.slots:
		case <-p.exited:
			return
		}
		if p.Retired() {
			return
		}
		var b *Batch
		select {
		case b = <-p.direct:
		case b = <-p.queue:
		default:
		}
		if b == nil {
			if held != nil {
				held.Release()
				held = nil
			}
			if b = p.nextBatch(); b == nil {
				return
			}
		}
		held = p.admit(b, held)
		if held != nil {
			p.Execute(b)
		}
	}
}

// admit waits for the grant for b (renewing held, when set), for as long
// as somebody waits for one of b's requests and the stub takes work.
// Without a grant (nil) it hands b to the instance's next stub when this
// one was retired (room permitting), or else ends b's requests (cancelled,
// or not run), and gives back the pipeline slot taken for b.
func (p *Proc) admit(b *Batch, held Grant) Grant {
	ctx, cancel := p.batchContext(b)
	var g Grant
	var err error
	if held != nil {
		g, err = held.Renew(ctx)
	} else {
		g, err = p.cfg.Gate.Acquire(ctx)
	}
	cancel()
	if err == nil {
		return g
	}
	defer func() { p.slots <- struct{}{} }()
	why := backendapi.Errorf(backendapi.Cancelled, "request for model '%s' was cancelled while queued", p.cfg.Model)
	select {
	case <-p.exited:
		why = p.notStarted()
	default:
		if p.Retired() {
			select {
			case p.host.Direct() <- b:
				return nil
			default:
				why = backendapi.Errorf(backendapi.Unavailable, "Stub process '%s' of model '%s' was replaced before the request started: the request did not run; retry it.", p.cfg.Instance, p.cfg.Model)
			}
		}
	}
	for _, pr := range b.Items {
		p.host.Finish(pr, nil, why, true)
	}
	return nil
}

// batchContext is done once the stub takes no more work (it exited or
// was retired) or every request of b that has a caller has ended its
// context (fillers have none: a batch of fillers only waits for the stub).
func (p *Proc) batchContext(b *Batch) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(p.serving)
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
