package supervisor

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/backendapi/modelconfig"
	"github.com/stubvisor/stubvisor/supervisor/stubproc"
)

// The model config parameters that bound a stub's life and memory; each
// overrides the server flag of the same meaning.
const (
	ParamMaxRSSMB          = "MAX_RSS_MB"
	ParamMaxRequests       = "MAX_REQUESTS_PER_STUB"
	ParamMaxStubAgeS       = "MAX_STUB_AGE_S"
	ParamMemoryLimitMB     = "MEMORY_LIMIT_MB"
	ParamCUDAVisiblePerGPU = "CUDA_VISIBLE_DEVICES_PER_INSTANCE"
)

// stubLimits bound the life of a model's stubs. Crossing a soft limit
// (RSS, requests, age) recycles the stub: a replacement is started and
// initialized first, new work goes to it, and the old stub finishes what
// it was sent, then finalizes. The memory limit is hard: the kernel
// enforces it (package memlimit).
type stubLimits struct {
	maxRSS      uint64 // bytes
	maxRequests uint64
	maxAge      time.Duration
	memory      uint64 // bytes
	// cudaVisible gives each KIND_GPU instance CUDA_VISIBLE_DEVICES=<its
	// device>, so frameworks that default to device 0 use its own.
	cudaVisible bool
}

// parseStubLimits reads the limits of a model: its parameters, else the
// server's flags.
func parseStubLimits(cfg *inferencepb.ModelConfig, opts Options) (stubLimits, error) {
	l := stubLimits{
		maxRSS: opts.MaxRSSMB << 20, maxRequests: opts.MaxRequestsPerStub,
		maxAge: opts.MaxStubAge, memory: opts.MemoryLimitMB << 20,
	}
	for _, p := range []struct {
		name string
		set  func(uint64)
	}{
		{ParamMaxRSSMB, func(v uint64) { l.maxRSS = v << 20 }},
		{ParamMaxRequests, func(v uint64) { l.maxRequests = v }},
		{ParamMaxStubAgeS, func(v uint64) { l.maxAge = time.Duration(v) * time.Second }},
		{ParamMemoryLimitMB, func(v uint64) { l.memory = v << 20 }},
	} {
		v, ok := modelconfig.Parameter(cfg, p.name)
		if !ok || v == "" {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
		if err != nil {
			return l, backendapi.Errorf(backendapi.InvalidArg, "model '%s': parameter %s must be a whole number (0: no limit), got %q", cfg.GetName(), p.name, v)
		}
		p.set(n)
	}
	if v, ok := modelconfig.Parameter(cfg, ParamCUDAVisiblePerGPU); ok {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "yes", "true", "1":
			l.cudaVisible = true
		case "no", "false", "0", "":
		default:
			return l, backendapi.Errorf(backendapi.InvalidArg, "model '%s': parameter %s must be \"yes\" or \"no\", got %q", cfg.GetName(), ParamCUDAVisiblePerGPU, v)
		}
	}
	return l, nil
}

// humanBytes writes a size the way the recycle causes show it: "2.1 GiB".
func humanBytes(b uint64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	v, i := float64(b)/unit, 0
	for v >= unit && i < 3 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %s", v, []string{"KiB", "MiB", "GiB", "TiB"}[i])
}

// checkRecycle recycles the instance's stub when its RSS or age crossed
// the model's limit (the sampler calls it once a second).
func (inst *instance) checkRecycle(p *stubproc.Proc, rss uint64) {
	l := inst.mv.limits
	switch {
	case l.maxRSS > 0 && rss > l.maxRSS:
		inst.recycle(p, fmt.Sprintf("recycled: rss %s > %s %d", humanBytes(rss), ParamMaxRSSMB, l.maxRSS>>20))
	case l.maxAge > 0 && time.Since(p.Started()) > l.maxAge:
		inst.recycle(p, fmt.Sprintf("recycled: age %ds > %s %d", int(time.Since(p.Started()).Seconds()), ParamMaxStubAgeS, int(l.maxAge.Seconds())))
	}
}

// Recycle implements stubproc.Host: p reached MAX_REQUESTS_PER_STUB.
func (inst *instance) Recycle(p *stubproc.Proc, cause string) { inst.recycle(p, cause) }

// swap hands supervise a warm replacement for old, and the steps its load
// took.
type swap struct {
	next, old *stubproc.Proc
	cause     string
	steps     backendapi.LoadSteps
}

// recycle replaces p, once at a time: the replacement starts and
// initializes while p still serves (unless p is already retired), then
// supervise swaps it in and p drains and finalizes (retire). If the
// replacement fails, p keeps serving; a retired p is killed instead, and
// the instance restarts it as it would a dead stub.
func (inst *instance) recycle(p *stubproc.Proc, cause string) {
	inst.mu.Lock()
	if inst.stopping || inst.recycling || inst.proc != p {
		inst.mu.Unlock()
		return
	}
	inst.recycling = true
	inst.bg.Add(1)
	inst.mu.Unlock()
	inst.log.Info("recycling stub", "pid", p.PID(), "cause", cause)
	go func() {
		defer inst.bg.Done()
		defer func() {
			inst.mu.Lock()
			inst.recycling = false
			inst.mu.Unlock()
		}()
		next, steps, err := inst.prepare()
		if err != nil {
			inst.log.Error("recycle: the replacement did not start", "error", err)
			if p.Retired() {
				p.Kill("recycle failed: " + err.Error())
			}
			return
		}
		select {
		case inst.swapc <- swap{next, p, cause, steps}:
		case <-inst.stopc:
			next.Stop(time.Now().Add(inst.mv.sup.opts.FinalizeTimeout))
		}
	}()
}

// retireDrainMax bounds how long a retired stub may take to finish what
// it was sent before it is finalized anyway.
const retireDrainMax = 5 * time.Minute

// retire lets an old stub finish the requests it was sent, then
// finalizes it (bg goroutine).
func (inst *instance) retire(old *stubproc.Proc) {
	defer inst.bg.Done()
	old.Retire()
	deadline := time.Now().Add(retireDrainMax)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for old.InFlight() > 0 && time.Now().Before(deadline) {
		select {
		case <-old.Exited():
		case <-inst.stopc:
		case <-tick.C:
			continue
		}
		break
	}
	old.Stop(time.Now().Add(inst.mv.sup.opts.FinalizeTimeout))
	inst.log.Info("recycled stub finalized", "pid", old.PID())
}
