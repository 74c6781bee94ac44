package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
)

// AllDevices is the device of a --rate-limit-resource given without one:
// the count applies to every device.
const AllDevices = -1

// globalDevice is the device of a global resource's pool.
const globalDevice = -2

// ErrResources is the sentinel of a registration the rate limiter refuses
// (a resource both global and per device, or a count too small). The
// error's text is Triton's alone.
var ErrResources = errors.New("rate limiter: resources cannot be had")

// resourceError is a refused registration, in Triton's words.
type resourceError string

func (e resourceError) Error() string        { return string(e) }
func (e resourceError) Is(target error) bool { return target == ErrResources }

// Resource is one resource an instance group asks for
// (rate_limiter.resources): Count copies of Name, on the instance's
// device or, when Global, shared by the whole server.
type Resource struct {
	Name   string
	Count  uint32
	Global bool
}

// Supply is one --rate-limit-resource: Count copies of Name on Device
// (AllDevices: on every device).
type Supply struct {
	Name   string
	Count  int
	Device int
}

// pool names one resource's pool: a name on a device, or global.
type pool struct {
	name   string
	device int
}

// Limiter holds the resources of the whole server and the instances that
// wait for them.
type Limiter struct {
	// explicit are the counts the flags gave, by device then name; nil
	// when no flag gave one (then the largest ask decides).
	explicit map[int]map[string]uint64

	mu      sync.Mutex
	members map[*Instance]struct{}
	limits  map[pool]uint64 // how many copies each pool has
	used    map[pool]uint64 // how many are held now
	waiting []*waiter
	seq     uint64 // orders waiters that tie
}

// New makes a limiter with the counts the flags gave. A name given twice
// for the same device keeps the smaller count, as tritonserver does.
func New(supplies []Supply) *Limiter {
	l := &Limiter{members: map[*Instance]struct{}{}, limits: map[pool]uint64{}, used: map[pool]uint64{}}
	for _, s := range supplies {
		if l.explicit == nil {
			l.explicit = map[int]map[string]uint64{}
		}
		byName := l.explicit[s.Device]
		if byName == nil {
			byName = map[string]uint64{}
			l.explicit[s.Device] = byName
		}
		n := uint64(max(s.Count, 0))
		if old, ok := byName[s.Name]; !ok || n < old {
			byName[s.Name] = n
		}
	}
	return l
}

// Instance is one model instance registered with the limiter.
type Instance struct {
	l        *Limiter
	name     string
	needs    map[pool]uint64
	priority uint64 // the group's priority, at least 1

	// Under Limiter.mu: executions finished (the scaled priority's
	// factor), and the time spent waiting for a grant.
	execs  uint64
	waited time.Duration
	waits  uint64
}

// Register adds an instance on device (0 for KIND_CPU and KIND_MODEL)
// that needs resources, with its group's priority. It fails, leaving the
// limiter as it was, when the resources it asks for cannot be had.
func (l *Limiter) Register(name string, device int, resources []Resource, priority uint32) (*Instance, error) {
	inst := &Instance{l: l, name: name, needs: map[pool]uint64{}, priority: max(uint64(priority), 1)}
	for _, r := range resources {
		p := pool{name: r.Name, device: device}
		if r.Global {
			p.device = globalDevice
		}
		inst.needs[p] = uint64(r.Count) // a name listed twice: the last count, as in Triton
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.members[inst] = struct{}{}
	if err := l.computeLimits(); err != nil {
		delete(l.members, inst)
		_ = l.computeLimits() // what was valid before stays valid
		return nil, err
	}
	return inst, nil
}

// Unregister removes the instance (its model is unloaded). It is
// idempotent.
func (inst *Instance) Unregister() {
	l := inst.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.members[inst]; !ok {
		return
	}
	delete(l.members, inst)
	_ = l.computeLimits()
	l.grant()
}

// computeLimits sets every pool's count from the members' asks and the
// flags, and checks that every member can run. Called with mu held.
func (l *Limiter) computeLimits() error {
	asks := map[pool]uint64{}
	for m := range l.members {
		for p, n := range m.needs {
			asks[p] = max(asks[p], n)
		}
	}
	names := map[string]bool{} // name -> global
	for _, p := range sortedPools(asks) {
		global := p.device == globalDevice
		if g, seen := names[p.name]; seen && g != global {
			return resourceError(fmt.Sprintf("Resource \"%s\" is present as both global and device-specific resource in the model configuration.", p.name))
		}
		names[p.name] = global
	}
	limits := map[pool]uint64{}
	for _, p := range sortedPools(asks) {
		ask, have := asks[p], asks[p]
		if l.explicit != nil {
			have = l.explicitCount(p)
			if have < ask {
				return resourceError(fmt.Sprintf("Resource count for \"%s\" is limited to %d which will prevent scheduling of one or more model instances, the minimum required count is %d", p.name, have, ask))
			}
		}
		limits[p] = have
	}
	l.limits = limits
	return nil
}

// explicitCount is the flags' count for p: for a global resource the
// largest given for its name on any device, for a device's the larger of
// that device's and every device's; 0 when none names it.
func (l *Limiter) explicitCount(p pool) uint64 {
	var n uint64
	for device, byName := range l.explicit {
		if p.device == globalDevice || device == p.device || device == AllDevices {
			n = max(n, byName[p.name])
		}
	}
	return n
}

// sortedPools lists the pools of m in a fixed order, so that the first
// error found is always the same one.
func sortedPools(m map[pool]uint64) []pool {
	out := make([]pool, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].name != out[j].name {
			return out[i].name < out[j].name
		}
		return out[i].device < out[j].device
	})
	return out
}

// waiter is one Acquire waiting for its grant.
type waiter struct {
	inst    *Instance
	seq     uint64
	since   time.Time
	ready   chan struct{} // closed when granted
	granted bool
	blocked bool // Acquire had to wait (counted in Waited)
}

// Grant is the resources one execution holds; Release gives them back.
type Grant struct {
	inst     *Instance
	released bool // under Limiter.mu
}

// Acquire waits until the instance's resources are free and it is the
// next waiter in priority order, and takes them; it fails with ctx's
// error when ctx ends first (nothing is then held).
func (inst *Instance) Acquire(ctx context.Context) (*Grant, error) {
	inst.l.mu.Lock()
	return inst.await(ctx)
}

// Release gives the grant's resources back and counts the execution in
// the instance's scaled priority. It is idempotent.
func (g *Grant) Release() {
	l := g.inst.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if g.give() {
		l.grant()
	}
}

// Renew is Release and Acquire in one step: the instance, which has more
// work, waits for its next grant among the waiters of this moment, so the
// resources it gives back go to whoever is first in priority order, this
// instance included (Triton stages such an instance again before it picks
// the next). On error nothing is held.
func (g *Grant) Renew(ctx context.Context) (*Grant, error) {
	g.inst.l.mu.Lock()
	g.give()
	return g.inst.await(ctx)
}

// give returns the grant's resources once and counts the execution;
// false when it was given back before. Called with mu held.
func (g *Grant) give() bool {
	if g.released {
		return false
	}
	g.released = true
	g.inst.execs++
	g.inst.l.free(g.inst)
	return true
}

// await queues a waiter for inst and waits for its grant or ctx's end.
// Called with mu held; it unlocks it.
func (inst *Instance) await(ctx context.Context) (*Grant, error) {
	l := inst.l
	l.seq++
	w := &waiter{inst: inst, seq: l.seq, since: time.Now(), ready: make(chan struct{})}
	l.waiting = append(l.waiting, w)
	l.grant()
	if w.granted {
		l.mu.Unlock()
		return &Grant{inst: inst}, nil
	}
	w.blocked = true
	l.mu.Unlock()
	select {
	case <-w.ready:
		return &Grant{inst: inst}, nil
	case <-ctx.Done():
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.granted {
		// Granted as ctx ended: give it back unused.
		l.free(inst)
	} else {
		l.remove(w)
		inst.waited += time.Since(w.since)
	}
	l.grant() // w may have held back those behind it
	return nil, ctx.Err()
}

// free returns inst's resources to their pools. Called with mu held.
func (l *Limiter) free(inst *Instance) {
	for p, n := range inst.needs {
		l.used[p] -= min(n, l.used[p])
	}
}

// grant hands resources to waiters in priority order while the first one
// can have them. Called with mu held.
func (l *Limiter) grant() {
	for len(l.waiting) > 0 {
		w := l.next()
		if !l.fits(w.inst) {
			return
		}
		for p, n := range w.inst.needs {
			l.used[p] += n
		}
		l.remove(w)
		w.granted = true
		if w.blocked {
			w.inst.waited += time.Since(w.since)
			w.inst.waits++
		}
		close(w.ready)
	}
}

// next is the waiter to serve first: the lowest scaled priority
// (executions times priority), then the lower priority value, then the
// earliest. Called with mu held.
func (l *Limiter) next() *waiter {
	best := l.waiting[0]
	for _, w := range l.waiting[1:] {
		if w.before(best) {
			best = w
		}
	}
	return best
}

// before reports whether w goes before o.
func (w *waiter) before(o *waiter) bool {
	a, b := w.inst.execs*w.inst.priority, o.inst.execs*o.inst.priority
	switch {
	case a != b:
		return a < b
	case w.inst.priority != o.inst.priority:
		return w.inst.priority < o.inst.priority
	}
	return w.seq < o.seq
}

// fits reports whether every pool inst needs has room for it; an
// instance no longer registered is limited by nothing (its model is going
// away), so it never holds back the others. Called with mu held.
func (l *Limiter) fits(inst *Instance) bool {
	if _, ok := l.members[inst]; !ok {
		return true
	}
	for p, n := range inst.needs {
		if l.used[p]+n > l.limits[p] {
			return false
		}
	}
	return true
}

// remove takes w off the waiting list. Called with mu held.
func (l *Limiter) remove(w *waiter) {
	for i, x := range l.waiting {
		if x == w {
			l.waiting = append(l.waiting[:i], l.waiting[i+1:]...)
			return
		}
	}
}

// Waited is how long the instance waited for its grants in all, and how
// many of its grants had to wait.
func (inst *Instance) Waited() (time.Duration, uint64) {
	inst.l.mu.Lock()
	defer inst.l.mu.Unlock()
	return inst.waited, inst.waits
}

// Waiting reports whether an Acquire or Renew of the instance waits now.
func (inst *Instance) Waiting() bool {
	inst.l.mu.Lock()
	defer inst.l.mu.Unlock()
	for _, w := range inst.l.waiting {
		if w.inst == inst {
			return true
		}
	}
	return false
}

// Limits lists every pool's count, for the log: "name" for a global
// resource, "name@device" for a device's.
func (l *Limiter) Limits() map[string]uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]uint64{}
	for p, n := range l.limits {
		k := p.name
		if p.device != globalDevice {
			k = fmt.Sprintf("%s@%d", p.name, p.device)
		}
		out[k] = n
	}
	return out
}
