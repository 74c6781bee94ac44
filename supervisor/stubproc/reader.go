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
func (p *Proc) read(done, cancel <-chan struct{}) {
	defer func() { p.lead <- struct{}{} }()
	for {
		select {
		case <-done:
			return
		case <-cancel:
			return
		default:
		}
		m, err := p.conn.RecvSpin(time.Now().Add(readSlice), p.readSpin())
		if errors.Is(err, ipc.ErrTimeout) {
			continue
		}
		if err != nil {
			p.transportFailed(err)
			<-p.exited
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
		p.read(done, p.exited)
	case <-done:
	case <-p.exited:
	}
}

// readSpin is how long a reader polls the ring before it sleeps: the
// stub's own spin while one execute is outstanding, when its answer is the
// next thing to happen and is usually quicker than a wake-up; none when
// more are queued, where a polling reader only takes the CPU the stub and
// the front ends need (measured: c16 throughput fell by a third).
func (p *Proc) readSpin() time.Duration {
	p.mu.Lock()
	n := len(p.batches)
	p.mu.Unlock()
	if n == 1 {
		return p.cfg.IPC.Spin
	}
	return 0
}

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
		go p.host.BLS(p, m)
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
