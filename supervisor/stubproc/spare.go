package stubproc

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// spareGauge tells whether the machine has a CPU to spare for a stub that
// polls for its next message instead of sleeping (ipc's msg_poll word,
// sparePollFactor times the configured spin). At one request at a time, a
// stub that stays awake between a client's requests spares each of them
// the stub's wake-up, which on a small VM costs about what a whole request
// of a plain net/http handler does (docs/performance.md, round 10). The
// same poll is a loss wherever the CPU it takes is wanted: by CPU-bound
// neighbours, or by the server itself at higher concurrency. So it is
// allowed only while, over the last sparePeriod:
//
//   - the CPU time that processes other than this server and its stubs
//     left over (idle time, plus what the server tree used) came to at
//     least spareCPUs: the neighbours leave a CPU free;
//   - nearly every execute was sent with at most NumCPU-1 executes in
//     flight, counting itself: the server's own pipeline leaves a CPU free.
//
// Counting the server tree's own time as spare is what tells a quiet
// machine from a busy one. On a small machine the client, the server's
// threads and the stub contend with each other too, so every in-kernel
// sign of contention (the runnable count, run delay, CPU pressure) rises
// on both; only on a busy one does someone else take the CPU.
type spareGauge struct {
	mu      sync.Mutex
	next    time.Time
	last    cpuTimes
	sampled bool
	spare   atomic.Bool
	// procs are the live stubs, with their CPU time at their last sample
	// (-1: none yet).
	procs map[*Proc]time.Duration

	// executing counts the executes sent to any stub and not yet done;
	// sends and crowded count, since the last sample, the executes sent
	// and those sent with more than NumCPU-1 in flight.
	executing, sends, crowded atomic.Int64
}

// cpuTimes is one sample of the machine's idle time and this server's CPU
// time.
type cpuTimes struct {
	at    time.Time
	idle  time.Duration // the machine's, summed over its CPUs
	self  time.Duration // this process's
	stubs time.Duration // the stubs', since their own last samples
}

// spare is the process's gauge: the CPUs are the machine's, whichever
// model a stub serves.
var spare = spareGauge{procs: map[*Proc]time.Duration{}}

const (
	// sparePeriod is how often the gauge samples while executes are sent:
	// /proc/stat counts in 10 ms ticks, so a shorter period mostly
	// measures the tick, and a longer one reacts later to neighbours.
	sparePeriod = 100 * time.Millisecond
	// spareCPUs is the CPU time per second, in CPUs, that others must
	// leave to the server tree for the longer poll (measured on 2 vCPUs:
	// 1.35-1.70 at one request at a time, 0.17-0.81 beside two CPU-bound
	// neighbours).
	spareCPUs = 1.25
	// sparePollFactor scales the configured spin into the longer poll.
	sparePollFactor = 20
)

func (g *spareGauge) add(p *Proc) {
	g.mu.Lock()
	g.procs[p] = -1
	g.mu.Unlock()
}

func (g *spareGauge) remove(p *Proc) {
	g.mu.Lock()
	delete(g.procs, p)
	g.mu.Unlock()
}

// msgPoll returns how long a stub may poll for its next message:
// sparePollFactor times spin while a CPU is spare, else zero (the stub's
// own spin). It takes a new sample once the period has passed.
func (g *spareGauge) msgPoll(spin time.Duration, now time.Time) time.Duration {
	if g.mu.TryLock() {
		if !now.Before(g.next) {
			g.next = now.Add(sparePeriod)
			g.sample(now)
		}
		g.mu.Unlock()
	}
	if g.spare.Load() {
		return spin * sparePollFactor
	}
	return 0
}

// sent records an execute sent.
func (g *spareGauge) sent() {
	g.sends.Add(1)
	if g.executing.Add(1) > int64(max(runtime.NumCPU()-1, 1)) {
		g.crowded.Add(1)
	}
}

// done records that n executes ended (answered, or failed with their stub).
func (g *spareGauge) done(n int) { g.executing.Add(-int64(n)) }

// sample reads the CPU times and judges the period since the last sample;
// g.mu is held. A stub sent nothing since its last sample is not read (on
// a server of many models, most are idle): its time, a heartbeat's, is
// counted with the next sample that reads it.
func (g *spareGauge) sample(now time.Time) {
	s := cpuTimes{at: now, self: selfCPU()}
	idle, ok := systemCPU()
	s.idle = idle
	for p, prev := range g.procs {
		if !p.sentSince.Swap(false) && prev >= 0 {
			continue
		}
		if t, ok := procCPU(p.pid); ok {
			if prev >= 0 && t >= prev {
				s.stubs += t - prev
			}
			g.procs[p] = t
		}
	}
	sends, crowded := g.sends.Swap(0), g.crowded.Swap(0)
	if !ok {
		g.sampled = false
		g.spare.Store(false)
		return
	}
	if g.sampled {
		g.spare.Store(judgeSpare(s.at.Sub(g.last.at), s.idle-g.last.idle+s.self-g.last.self+s.stubs, sends, crowded))
	}
	g.last, g.sampled = s, true
}

// judgeSpare decides one period of wall time: left is the CPU time others
// left to the server tree, sends and crowded the executes sent and those
// sent with no CPU over.
func judgeSpare(wall, left time.Duration, sends, crowded int64) bool {
	return wall > 0 && float64(left) >= spareCPUs*float64(wall) && crowded*10 <= sends
}
