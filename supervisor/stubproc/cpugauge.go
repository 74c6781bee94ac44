package stubproc

import (
	"sync"
	"sync/atomic"
	"time"
)

// cpuGauge tells a reader whether the CPUs are contended, from how long
// the stub waited for a CPU each time it was woken (its run delay per
// time slice, sampled at most every gaugePeriod). A reader polls for the
// reply to the stub's one outstanding execute only while they are not:
// on a quiet machine the poll catches the reply without a futex wake (a
// c1 request then costs one wake-up fewer), but beside CPU-bound
// neighbours the poll takes the CPU the stub, or a neighbour whose slice
// the stub then waits out, needs (measured: add_sub c1 with two
// neighbours lost 10-30% of its throughput to a 200 µs poll).
type cpuGauge struct {
	mu        sync.Mutex
	next      time.Time     // when to sample again
	wait      time.Duration // the stub's run delay at the last sample
	slices    uint64        // its time slices at the last sample
	sampled   bool          // wait and slices hold a sample
	contended atomic.Bool
}

// gaugePeriod is how often the gauge reads the stub's scheduler figures
// (a /proc read of some microseconds).
const gaugePeriod = 20 * time.Millisecond

// contendedWait is the mean wait for a CPU per time slice above which the
// CPUs count as contended: a few microseconds when a core is free, tens
// to hundreds beside CPU-bound neighbours.
const contendedWait = 20 * time.Microsecond

// busy reports whether the stub pid's CPUs were contended at the last
// sample, taking a new one when gaugePeriod has passed. Without the
// figures (no /proc/<pid>/schedstat) the CPUs count as contended.
func (g *cpuGauge) busy(pid int, now time.Time) bool {
	if g.mu.TryLock() {
		if !now.Before(g.next) {
			g.next = now.Add(gaugePeriod)
			g.sample(pid)
		}
		g.mu.Unlock()
	}
	return g.contended.Load()
}

// sample reads the stub's figures and judges the period since the last
// sample; g.mu is held.
func (g *cpuGauge) sample(pid int) {
	g.judge(runDelay(pid))
}

// judge takes one sample of the stub's run delay and time slices (ok:
// the figures could be read); g.mu is held.
func (g *cpuGauge) judge(wait time.Duration, slices uint64, ok bool) {
	if !ok {
		g.sampled = false
		g.contended.Store(true)
		return
	}
	if g.sampled && slices > g.slices {
		mean := (wait - g.wait) / time.Duration(slices-g.slices)
		g.contended.Store(mean > contendedWait)
	} else if !g.sampled {
		g.contended.Store(true) // until a period was measured
	}
	g.wait, g.slices, g.sampled = wait, slices, true
}
