package supervisor

import (
	"context"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/supervisor/ratelimit"
	"github.com/stubvisor/stubvisor/supervisor/stubproc"
)

// The rate limiter (package ratelimit) in the request path: with
// --rate-limit=execution_count, each instance of a group that has a
// rate_limiter is registered with the server's limiter when its version
// starts, and its stubs send an execute only once the limiter grants its
// resources (stubproc.Config.Gate); the grant is given back when the
// execute ends or the stub dies, or renewed in one step when the instance
// has more work. Warmup executes wait for a grant too. Groups without a
// rate_limiter are not limited, as Triton documents; with the limiter off
// the rate_limiter of every config is ignored.

// RateLimitResource is one --rate-limit-resource: Count copies of Name on
// Device (-1: on every device).
type RateLimitResource struct {
	Name   string
	Count  int
	Device int
}

// newRateLimiter is the server's limiter, nil when rate limiting is off.
func newRateLimiter(opts Options) *ratelimit.Limiter {
	if !opts.RateLimit {
		return nil
	}
	supplies := make([]ratelimit.Supply, len(opts.RateLimitResources))
	for i, r := range opts.RateLimitResources {
		supplies[i] = ratelimit.Supply{Name: r.Name, Count: r.Count, Device: r.Device}
		if r.Device < 0 {
			supplies[i].Device = ratelimit.AllDevices
		}
	}
	return ratelimit.New(supplies)
}

// registerRateLimits registers the version's limited instances; on a
// refusal (Triton's text) none stays registered.
func (mv *modelVersion) registerRateLimits() error {
	l := mv.sup.limiter
	if l == nil {
		return nil
	}
	for _, inst := range mv.instances {
		rl := inst.rateLimit
		if rl == nil {
			continue
		}
		res := make([]ratelimit.Resource, len(rl.GetResources()))
		for i, r := range rl.GetResources() {
			res[i] = ratelimit.Resource{Name: r.GetName(), Count: r.GetCount(), Global: r.GetGlobal()}
		}
		reg, err := l.Register(inst.name, inst.device, res, rl.GetPriority())
		if err != nil {
			mv.unregisterRateLimits()
			return backendapi.Errorf(backendapi.InvalidArg, "%s", err.Error())
		}
		inst.limited.Store(reg)
		mv.gated.Store(true)
	}
	if mv.gated.Load() {
		mv.sup.log.Debug("rate limiter resources", "model", mv.name, "counts", l.Limits())
	}
	return nil
}

// unregisterRateLimits takes the version's instances off the limiter
// (idempotent).
func (mv *modelVersion) unregisterRateLimits() {
	for _, inst := range mv.instances {
		if reg := inst.limited.Load(); reg != nil {
			reg.Unregister()
		}
	}
}

// gate is the instance's stubproc.Config.Gate, nil when it is not limited.
func (inst *instance) gate() stubproc.Gate {
	reg := inst.limited.Load()
	if reg == nil {
		return nil
	}
	return rateGate{reg}
}

// warmupGrant waits, for a limited instance, for the grant of one warmup
// execute, as Triton sends warmup through its rate limiter too (a model's
// warmup is when its memory use peaks), bounded by ctx, the stub's exit
// and the instance's stop. The returned func gives the grant back.
func (inst *instance) warmupGrant(ctx context.Context, p *stubproc.Proc) (func(), error) {
	reg := inst.limited.Load()
	if reg == nil {
		return func() {}, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-p.Exited():
		case <-inst.stopc:
		case <-ctx.Done():
		}
		cancel()
	}()
	g, err := reg.Acquire(ctx)
	if err != nil {
		return nil, backendapi.Errorf(backendapi.Unavailable, "waiting for the rate limiter's resources: %v", err)
	}
	return g.Release, nil
}

// rateGate and rateGrant put a limited instance's registration behind
// stubproc's Gate and Grant.
type rateGate struct{ reg *ratelimit.Instance }

type rateGrant struct{ g *ratelimit.Grant }

func (r rateGate) Acquire(ctx context.Context) (stubproc.Grant, error) {
	g, err := r.reg.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return rateGrant{g}, nil
}

func (r rateGrant) Release() { r.g.Release() }

func (r rateGrant) Renew(ctx context.Context) (stubproc.Grant, error) {
	g, err := r.g.Renew(ctx)
	if err != nil {
		return nil, err
	}
	return rateGrant{g}, nil
}
