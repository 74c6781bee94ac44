package stubproc

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stubvisor/stubvisor/supervisor/procstat"
)

// spareGauge tells whether the machine has a CPU to spare for a stub that
// polls for its next message instead of sleeping (ipc's msg_poll word,
// sparePollFactor times the configured spin). At one request at a time, a
// stub that stays awake between a client's requests spares each of them
// the stub's wake-up, which on a small VM costs about what a whole request
// of a plain net/http handler does (docs/performance.md, round 10). The
// same poll is a loss wherever the CPU it takes is wanted: by CPU-bound
// neighbours, by the server itself at higher concurrency, or by the next
// stub of a chain. So it goes to one stub at a time, sent two executes in
// a row (see holder), and only while, over the last sparePeriod:
//
//   - the CPU time that processes other than this server and its stubs
//     left over (idle time, plus what the server tree used) came to at
//     least spareCPUs: the neighbours leave a CPU free;
//   - nearly every execute was sent with at most GOMAXPROCS-1 executes in
//     flight, counting itself: the server's own pipeline leaves a CPU free.
//
// The CPUs the server may use bound both, not the machine's: GOMAXPROCS,
// or the cgroup's CPU quota or the CPUs its affinity allows where that is
// lower (the Go runtime keeps GOMAXPROCS at 2 or more under a smaller
// quota, and GOMAXPROCS set in the environment outranks the affinity). On
// a server pinned to one CPU, a polling stub takes that CPU from the
// thread that would send its next execute (measured under `taskset -c 1`
// with GOMAXPROCS=2: quiet c1 ran at 896-908 rps before the affinity was
// read, 2,006-3,349 after). A poll that spent a
// pod's quota would take it from the server however idle the node is
// (measured: under a 1-CPU quota, quiet c1 gained nothing and the cgroup
// was throttled; docs/performance.md, round 10).
//
// Counting the server tree's own time as spare is what tells a quiet
// machine from a busy one. On a small machine the client, the server's
// threads and the stub contend with each other too, so every in-kernel
// sign of contention (the runnable count, run delay, CPU pressure) rises
// on both; only on a busy one does someone else take the CPU.
type spareGauge struct {
	mu      sync.Mutex
	next    time.Time
	prev    cpuTimes // the last sample
	sampled bool
	spare   atomic.Bool
	// procs are the live stubs, with their CPU time at their last sample
	// (-1: none yet).
	procs map[*Proc]time.Duration

	// holder is the stub whose msg_poll word is set, if any; last is the
	// stub sent the last execute. Only a stub sent two executes in a row
	// is granted the longer poll: at one request at a time its next
	// message is the next thing the server sends. Where sends go round
	// several stubs (the steps of an ensemble or a BLS chain, or
	// instances), each would poll while the next one works, taking the
	// CPU that the server and the client need meanwhile (measured: a
	// 3-step ensemble at c1 lost 13% when each step's stub polled until
	// the next step's was sent).
	holdMu sync.Mutex
	holder atomic.Pointer[Proc]
	last   atomic.Pointer[Proc]

	// executing counts the executes sent to any stub and not yet done;
	// sends and crowded count, since the last sample, the executes sent
	// and those sent with more than cpus-1 in flight. cpus is usableCPUs
	// at the last sample, rounded up (GOMAXPROCS may change with a
	// container's limit, and reading it takes the scheduler's lock).
	executing, sends, crowded, cpus atomic.Int64
}

// cpuTimes is one sample of the machine's idle time and this process's
// CPU time (the stubs' are kept per stub, in procs).
type cpuTimes struct {
	at   time.Time
	idle time.Duration // the machine's, summed over its CPUs
	self time.Duration // this process's
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

// add registers a live stub (Spawn).
func (g *spareGauge) add(p *Proc) {
	g.mu.Lock()
	g.procs[p] = -1
	g.mu.Unlock()
}

// remove forgets a stub that exited (the reaper).
func (g *spareGauge) remove(p *Proc) {
	g.mu.Lock()
	delete(g.procs, p)
	g.mu.Unlock()
	g.last.CompareAndSwap(p, nil)
	g.holdMu.Lock()
	g.holder.CompareAndSwap(p, nil)
	g.holdMu.Unlock()
}

// grant is called before an execute is sent to p: while a CPU is spare,
// and the last execute went to p too, it lets p poll for its next message
// for sparePollFactor times spin; otherwise it takes the longer poll back
// from whichever stub has it. It takes a new sample once the period has
// passed.
func (g *spareGauge) grant(p *Proc, spin time.Duration, now time.Time) {
	if g.mu.TryLock() {
		if !now.Before(g.next) {
			g.next = now.Add(sparePeriod)
			g.sample(now)
		}
		g.mu.Unlock()
	}
	again := g.last.Swap(p) == p
	if again && g.spare.Load() {
		if g.holder.Load() != p {
			g.setHolder(p, spin*sparePollFactor)
		}
	} else if g.holder.Load() != nil {
		g.setHolder(nil, 0)
	}
}

// setHolder takes the longer poll back from the holder and gives it to p
// (nil: to none).
func (g *spareGauge) setHolder(p *Proc, poll time.Duration) {
	g.holdMu.Lock()
	defer g.holdMu.Unlock()
	if old := g.holder.Swap(p); old != nil && old != p {
		old.conn.SetMsgPoll(0)
	}
	if p != nil {
		p.conn.SetMsgPoll(poll)
	}
}

// sent records an execute sent.
func (g *spareGauge) sent() {
	g.sends.Add(1)
	if g.executing.Add(1) > max(g.cpus.Load()-1, 1) {
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
	idle, err := procstat.IdleTime()
	measured := err == nil
	s.idle = idle
	var stubs time.Duration // since each stub's own last sample
	for p, prev := range g.procs {
		if !p.sentSince.Swap(false) && prev >= 0 {
			continue
		}
		if t, err := procstat.CPU(p.pid); err == nil {
			if prev >= 0 && t >= prev {
				stubs += t - prev
			}
			g.procs[p] = t
		}
	}
	sends, crowded := g.sends.Swap(0), g.crowded.Swap(0)
	cpus := usableCPUs()
	g.cpus.Store(int64(math.Ceil(cpus)))
	spare := measured && g.sampled && judgeSpare(s.at.Sub(g.prev.at), s.idle-g.prev.idle+s.self-g.prev.self+stubs, sends, crowded, cpus)
	g.spare.Store(spare)
	if !spare && g.holder.Load() != nil {
		g.setHolder(nil, 0)
	}
	g.prev, g.sampled = s, measured
}

// usableCPUs is how many CPUs the server may use: GOMAXPROCS, or fewer
// where the cgroup's quota or the calling thread's affinity allows fewer.
func usableCPUs() float64 {
	cpus := float64(runtime.GOMAXPROCS(0))
	if q, ok := cpuQuota(); ok && q < cpus {
		cpus = q
	}
	if n, ok := affinityCPUs(); ok && float64(n) < cpus {
		cpus = float64(n)
	}
	return cpus
}

// judgeSpare decides one period of wall time: left is the CPU time others
// left to the server tree (of which it may use at most cpus CPUs), sends
// and crowded the executes sent and those sent with no CPU over.
func judgeSpare(wall, left time.Duration, sends, crowded int64, cpus float64) bool {
	left = min(left, time.Duration(cpus*float64(wall)))
	return wall > 0 && float64(left) >= spareCPUs*float64(wall) && crowded*10 <= sends
}
