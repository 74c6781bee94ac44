package stubproc

import (
	"errors"
	"fmt"
	"time"

	"github.com/stubvisor/stubvisor/ipc"
)

// readSlice bounds one wait of a reader, so it notices its caller's
// cancellation.
const readSlice = 20 * time.Millisecond

// read makes the caller the ring's reader until done or cancel closes: it
// handles every message that arrives, whoever it is for. The caller took
// p.lead; read gives it back, so the next waiter takes over. A transport
// failure ends the stub; read then returns once the process is reaped.
//
// With serve (a caller waiting for its own request), a BLS call the stub
// makes is served on this goroutine, as an ensemble step would be: read
// gives the lead back first and returns once the call ended or cancel
// closed (Host.BLS goes on on a goroutine of its own then), and the caller
// takes its turn again. That spares the hop a goroutine start and this
// reader a poll of a ring that stays quiet until the call's answer is in.
// While it serves, the stub's other messages wait for another reader, or
// for the end of the call's current read slice (Request.AwaitServing):
// hence only a call that streams nothing (neither the BLS call nor the
// calling model decoupled) is served so; the others start a goroutine.
// Once until passes (zero: never), read returns as it does when cancel
// closes.
func (p *Proc) read(done, cancel <-chan struct{}, serve bool, until time.Time) {
	lead := true
	defer func() {
		if lead {
			p.lead <- struct{}{}
		}
	}()
	for {
		select {
		case <-done:
			return
		case <-cancel:
			return
		default:
		}
		deadline := time.Now().Add(readSlice)
		if !until.IsZero() {
			if !deadline.Before(until) {
				deadline = until
			}
			if !time.Now().Before(until) {
				return
			}
		}
		m, err := p.conn.RecvSpin(deadline, p.readSpin())
		if errors.Is(err, ipc.ErrTimeout) {
			continue
		}
		if err != nil {
			p.transportFailed(err)
			<-p.exited
			return
		}
		if x, ok := m.(*ipc.InferExecMsg); ok && serve && !x.Decoupled && !p.cfg.Decoupled {
			lead = false
			p.lead <- struct{}{}
			p.host.BLS(p, x, cancel)
			return
		}
		p.handle(m)
	}
}

// readFor stands in for a caller that gave up while the stub still owes it
// a reply: it takes its turn reading until done closes or the stub dies.
func (p *Proc) readFor(done <-chan struct{}) {
	select {
	case <-p.lead:
		p.read(done, p.exited, false, time.Time{})
	case <-done:
	case <-p.exited:
	}
}

// DrainIfFree handles the messages queued on the ring when nobody reads
// it: a goroutine serving one of the stub's BLS calls (read) looks now and
// then, so that the stub's other messages (a BLS call from another thread)
// wait for less than the watchdog's period.
func (p *Proc) DrainIfFree() {
	if _, in := p.conn.Depths(); in > 0 {
		p.drainIdle()
	}
}

// readSpin is how long a reader polls the ring before it sleeps: while
// one execute is outstanding its answer is the next thing to happen, so
// the reader may poll for up to replySpinFactor times the stub's own spin
// while nothing else waits for the stub and the CPUs are not contended
// (cpuGauge): a Python model's execute takes longer than the stub's poll
// for a message, 50 µs by default, and a reply that comes after the poll
// costs a futex wake of this thread. Otherwise the limit is the stub's
// spin, which a Python execute outlasts, so the spinner (ipc) soon stops
// polling. None when more executes are outstanding, where a polling
// reader only takes the CPU the stub and the front ends need (measured:
// c16 throughput fell by a third).
func (p *Proc) readSpin() time.Duration {
	p.mu.Lock()
	n := len(p.batches)
	p.mu.Unlock()
	if n != 1 {
		return 0
	}
	if len(p.queue) > 0 || len(p.direct) > 0 || p.cpu.busy(p.pid, time.Now()) {
		return p.cfg.IPC.Spin
	}
	return p.cfg.IPC.Spin * replySpinFactor
}

// replySpinFactor scales the configured spin into the longest poll of a
// reader waiting for its one outstanding execute.
const replySpinFactor = 4

// drain handles the messages already queued on the ring; the caller holds
// p.lead. It returns ErrTimeout once the ring is empty, or why reading
// failed.
func (p *Proc) drain() error {
	for {
		m, err := p.conn.Recv(time.Now())
		if err != nil {
			return err
		}
		p.handle(m)
	}
}

// transportFailed ends a stub whose ring cannot be read any more.
func (p *Proc) transportFailed(err error) {
	switch {
	case errors.Is(err, ipc.ErrProtocol):
		p.log.Error("stub broke the protocol; killing it", "error", err)
		p.Kill("protocol violation: " + err.Error())
	case p.Alive() && !errors.Is(err, ipc.ErrPeerDead):
		p.Kill("transport failed: " + err.Error())
	}
}

// handle acts on one message from the stub.
func (p *Proc) handle(m ipc.Message) {
	switch m := m.(type) {
	case *ipc.ExecuteDoneMsg:
		p.executeDone(m)
	case *ipc.ResponseMsg:
		p.deliver(&m.Response)
	case *ipc.ResultMsg:
		p.mu.Lock()
		c := p.calls[m.ID]
		delete(p.calls, m.ID)
		p.mu.Unlock()
		if c != nil {
			c.res = m
			close(c.done)
		}
	case *ipc.LogMsg:
		p.log.Log(stubLogLevel(m.Level), m.Message, "file", fmt.Sprintf("%s:%d", m.File, m.Line))
	case *ipc.InferExecMsg:
		blsWorkers.run(func() { p.host.BLS(p, m, nil) })
	case *ipc.FreeMsg:
		p.freeOwn(m.Offsets)
	case *ipc.InferCancelMsg:
		p.host.BLSCancel(p, m)
	case *ipc.ModelControlMsg:
		go p.host.Control(p, m)
	default:
		p.log.Warn("unexpected message from stub", "kind", m.Kind())
	}
}
