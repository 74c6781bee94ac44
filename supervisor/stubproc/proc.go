package stubproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc"
)

// Proc is one incarnation of a stub: a process, its region, and the
// goroutines that serve it. When the process dies — for any reason — the
// reaper marks the region dead, fails every request the stub held, and the
// instance decides whether to start another.
//
//	reaper:   cmd.Wait -> cause -> conn.MarkDead -> close(exited) -> drain, fail the rest
//	readers:  callers waiting for a reply take turns reading the ring (read)
//	dispatch: model queue -> Execute (at most Config.PipelineDepth outstanding)
//	watchdog: heartbeat age and execute deadline -> SIGKILL; drains the ring when nobody reads
//
// There is no goroutine dedicated to the ring: the caller that waits for a
// reply reads it, handling every message for everyone (leader/follower),
// so on the common path a reply reaches its caller without a hand-off
// between goroutines, which on a small machine costs more than the stub.
type Proc struct {
	cfg  Config
	host Host
	log  hclog.Logger
	conn *ipc.Conn
	cmd  *exec.Cmd
	pid  int
	// conf confines the process (Config.Confine), or is nil.
	conf Confinement
	// retired is closed when the stub is to take no more work (it is
	// being replaced); sent counts the requests sent to it (under sendMu).
	retired    chan struct{}
	retireOnce sync.Once
	sent       uint64

	started time.Time
	// readyFn: the model defines its own readiness check (is_ready()),
	// as its Initialize answer said; set before the process serves.
	readyFn bool
	exited  chan struct{} // closed once the process is reaped and the region marked dead
	// serving ends when the stub takes no more work (exited or retired;
	// endServing): a wait for the gate ends with it.
	serving    context.Context
	endServing context.CancelFunc
	// released is closed once the region is unmapped and its fd closed.
	released chan struct{}
	cause    string // why it exited; set before exited is closed
	// killReason, when set, explains a kill the supervisor decided on.
	killReason atomic.Pointer[string]

	slots chan struct{} // one token per Execute the stub may have queued
	// cpu says whether the stub waits for a CPU when woken (readSpin).
	cpu cpuGauge
	// sentSince is set by each send and cleared by the spare gauge's
	// sample, which reads the CPU time only of stubs that had work.
	sentSince atomic.Bool
	// direct and queue are the host's queues the stub takes batches from.
	direct, queue <-chan *Batch
	// lead is the token for reading the ring: one reader at a time.
	lead chan struct{}
	// watchIdle is set while the watchdog sleeps on its idle grid; the
	// first Execute after that kicks it (watchKick) back to its short
	// period, so what the stub sends around a request, while no caller
	// reads (a log line after its final response), is read within
	// watchInterval rather than at the next grid tick.
	watchIdle atomic.Bool
	watchKick chan struct{}

	// sendMu makes taking a batch id and sending the batch one step, so
	// that ids follow the order in which the stub reads them.
	sendMu   sync.Mutex
	mu       sync.Mutex
	batches  map[uint64]*Batch
	requests map[uint64]*Request
	calls    map[uint64]*callReply
	// execSince is when the stub began the execute it is working on (zero
	// when idle); the watchdog compares it with the model's execute timeout.
	execSince time.Time
	nextID    uint64
	okExecs   uint64 // executions that completed without a stub error

	// refs counts responses whose outputs still alias the stub's arena; the
	// region is unmapped only when the process is gone and refs is zero.
	refs     int
	failed   bool // failAll ran: no new request may be registered
	reaped   bool // the process is gone and nothing reads the ring any more
	unmapped bool

	// relOffs are output blocks released but not yet handed back to the
	// stub (releaseLater); relBytes is their size.
	relMu    sync.Mutex
	relOffs  []uint64
	relBytes uint64

	// shm is the lifeline (fd 4 in the stub) and the client regions the
	// stub has mapped (stubshm.go).
	shm stubShm
}

// ErrStubExited is the sentinel for requests that a dying stub held.
var ErrStubExited = errors.New("stub exited")

// Spawn starts a stub process and completes the handshake: the
// stub's Hello, with the protocol version checked, within the start
// timeout. It returns with the watchdog running and nothing initialised.
func Spawn(cfg Config, host Host) (_ *Proc, retErr error) {
	name := cfg.Instance
	conn, err := ipc.Create("stubvisor:"+name, cfg.IPC)
	if err != nil {
		return nil, fmt.Errorf("spawn %s: %w", name, err)
	}
	defer func() {
		if retErr != nil {
			conn.MarkDead()
			_ = conn.Close()
		}
	}()
	cmd, err := cfg.Command()
	if err != nil {
		return nil, err
	}
	lifeParent, lifeChild, err := lifeline()
	if err != nil {
		return nil, fmt.Errorf("spawn %s: %w", name, err)
	}
	launched := false
	defer func() {
		lifeChild.Close()
		if !launched {
			lifeParent.Close()
		}
	}()
	// ExtraFiles[i] becomes fd 3+i in the stub.
	cmd.ExtraFiles = []*os.File{ipc.RegionFD - 3: conn.File(), ipc.LifelineFD - 3: lifeChild}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("spawn %s: %w", name, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("spawn %s: %w", name, err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	conf, err := startConfined(cfg, cmd)
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("spawn %s: %w", name, err)
	}
	launched = true
	p := &Proc{
		shm: stubShm{life: lifeParent},
		cfg: cfg, host: host, direct: host.Direct(), queue: host.Queue(), log: cfg.Log, conn: conn, cmd: cmd, pid: cmd.Process.Pid,
		conf: conf, retired: make(chan struct{}),
		started: time.Now(), exited: make(chan struct{}), released: make(chan struct{}),
		slots: make(chan struct{}, cfg.PipelineDepth), lead: make(chan struct{}, 1), watchKick: make(chan struct{}, 1),
		batches: map[uint64]*Batch{}, requests: map[uint64]*Request{}, calls: map[uint64]*callReply{},
	}
	p.serving, p.endServing = context.WithCancel(context.Background())
	spare.add(p)
	for range cfg.PipelineDepth {
		p.slots <- struct{}{}
	}
	var pipes sync.WaitGroup
	pipes.Add(2)
	go func() { defer pipes.Done(); forwardLines(outR, cfg.Log, hclog.Info); outR.Close() }()
	go func() { defer pipes.Done(); forwardLines(errR, cfg.Log, hclog.Warn); errR.Close() }()
	go p.reap(&pipes, outR, errR)
	defer func() {
		if retErr != nil {
			p.Kill("handshake failed")
			<-p.exited
		}
	}()

	deadline := time.Now().Add(cfg.StartTimeout)
	m, err := conn.Recv(deadline)
	p.lead <- struct{}{} // from now on, whoever waits for a reply reads
	if err != nil {
		if errors.Is(err, ipc.ErrPeerDead) {
			<-p.exited
			//lint:ignore ST1005 Triton's text, which its tests look for
			return nil, fmt.Errorf("Stub process '%s' is not healthy. It exited before the handshake (%s)%s", name, p.cause, cfg.Diagnose())
		}
		return nil, fmt.Errorf("stub %s: no handshake within %s: %w%s", name, cfg.StartTimeout, err, cfg.Diagnose())
	}
	hello, ok := m.(*ipc.HelloMsg)
	if !ok {
		return nil, fmt.Errorf("stub %s: first message is %T, want Hello: %w", name, m, ipc.ErrProtocol)
	}
	if hello.Version != ipc.ProtocolVersion {
		return nil, fmt.Errorf("stub %s speaks protocol %d, the supervisor %d: %w", name, hello.Version, ipc.ProtocolVersion, ipc.ErrVersion)
	}
	p.log.Debug("stub attached", "pid", p.pid, "info", hello.Info)
	go p.watch()
	return p, nil
}

// startConfined starts cmd under the confinement Config.Confine sets up
// (nil without one), applied before the handshake, so before the model
// loads (Initialize).
func startConfined(cfg Config, cmd *exec.Cmd) (Confinement, error) {
	var conf Confinement
	if cfg.Confine != nil {
		var err error
		if conf, err = cfg.Confine(cmd); err != nil {
			return nil, err
		}
	}
	if err := cfg.Launcher.start(cmd); err != nil {
		if conf != nil {
			conf.Close()
		}
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	if conf != nil {
		if err := conf.Started(cmd.Process.Pid); err != nil {
			cfg.Log.Error("confining the stub failed", "error", err)
		}
	}
	return conf, nil
}

// reap waits for the process, records why it ended, ends the helpers the
// model started (the stub's process group), wakes everything that waits on
// the region, handles what the stub sent before it died and fails the
// requests it still held. It goes by the process's exit, not by its
// stdout and stderr, which a helper outside the group may hold open.
func (p *Proc) reap(pipes *sync.WaitGroup, out, errs *os.File) {
	err := p.cmd.Wait()
	killGroup(p.pid)
	cause := "exited"
	if err != nil {
		cause = err.Error() // "signal: killed", "exit status 1"
	}
	if r := p.killReason.Load(); r != nil {
		cause = *r + " (" + cause + ")"
	}
	if p.conf != nil {
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
			if why := p.conf.ExitCause(ws); why != "" {
				cause = why + " (" + cause + ")"
			}
		}
		p.conf.Close()
	}
	p.cause = cause
	spare.remove(p)
	p.conn.MarkDead()
	p.shm.closeLifeline(p)
	close(p.exited)
	p.endServing()
	// The last lines the stub wrote (a traceback) are logged before its
	// requests fail, unless something it started keeps the pipes open.
	piped := make(chan struct{})
	go func() { pipes.Wait(); close(piped) }()
	select {
	case <-piped:
	case <-time.After(pipeGrace):
		_ = out.Close()
		_ = errs.Close()
	}
	<-p.lead // a reader stops at the death; the token is never given back
	if err := p.drain(); errors.Is(err, ipc.ErrProtocol) {
		p.log.Error("stub broke the protocol before it exited", "error", err)
	}
	p.failAll()
	p.mu.Lock()
	p.reaped = true
	p.mu.Unlock()
	p.maybeUnmap()
}

// pipeGrace is how long the reaper waits for a dead stub's stdout and
// stderr to close before it stops reading them.
const pipeGrace = 200 * time.Millisecond

// Kill ends the process with SIGKILL, recording why (first reason wins).
func (p *Proc) Kill(reason string) {
	p.killReason.CompareAndSwap(nil, &reason)
	kill(p.cmd.Process)
}

// Alive reports whether the process has not been reaped yet.
func (p *Proc) Alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// maybeUnmap closes the region once nothing can touch it any more.
func (p *Proc) maybeUnmap() {
	p.mu.Lock()
	do := p.reaped && p.refs == 0 && !p.unmapped
	if do {
		p.unmapped = true
	}
	p.mu.Unlock()
	if do {
		_ = p.conn.Close()
		close(p.released)
	}
}

// deathError turns a transport error into a description of the death,
// starting with Triton's words for it (which its tests look for in the log
// when a stub dies in initialize).
func (p *Proc) deathError(err error) error {
	if errors.Is(err, ipc.ErrPeerDead) || errors.Is(err, ErrStubExited) || errors.Is(err, ipc.ErrClosed) {
		<-p.exited
		//lint:ignore ST1005 Triton's text, which its tests look for
		return fmt.Errorf("Stub process '%s' is not healthy. It exited: %s (%w)", p.cfg.Instance, p.cause, ErrStubExited)
	}
	return err
}

// failure is the error every request held by a dead stub gets: it names
// the model, the instance and the cause, and says it is worth retrying.
func (p *Proc) failure() error {
	if p.host.Stopping() {
		return backendapi.Errorf(backendapi.Unavailable, "Stub process '%s' of model '%s' died while executing the request: %s. The model is being unloaded.",
			p.cfg.Instance, p.cfg.Model, p.cause)
	}
	return backendapi.Errorf(backendapi.Unavailable, "Stub process '%s' of model '%s' died while executing the request: %s. The stub is being restarted; retry the request.",
		p.cfg.Instance, p.cfg.Model, p.cause)
}

// notStarted is the error of a request a dead stub held but had not begun
// to execute (it waited in the stub's ring behind another execute).
func (p *Proc) notStarted() error {
	return backendapi.Errorf(backendapi.Unavailable, "Stub process '%s' of model '%s' died before the request started (%s): the request did not run; retry it.",
		p.cfg.Instance, p.cfg.Model, p.cause)
}

// watch enforces the heartbeat and execute timeouts while the process
// lives. It looks every watchInterval while the stub has work, and every
// idleWatch otherwise, so an idle stub costs its supervisor about one
// wake-up per heartbeat period.
func (p *Proc) watch() {
	idle := p.idleWatch()
	tick := time.NewTimer(untilGrid(time.Now(), idle))
	p.watchIdle.Store(true)
	defer tick.Stop()
	lastBeat, lastChange := p.conn.PeerHeartbeat(), time.Now()
	var shortUntil time.Time // the short period lasts this long after work
	for {
		select {
		case <-p.exited:
			return
		case <-p.watchKick:
			shortUntil = time.Now().Add(watchTrail)
			tick.Reset(watchInterval)
		case now := <-tick.C:
			p.drainIdle()
			p.flushReleases()
			if b := p.conn.PeerHeartbeat(); b != lastBeat {
				lastBeat, lastChange = b, now
				p.host.Heartbeat(now)
			} else if age := now.Sub(lastChange); age > p.cfg.HeartbeatTimeout {
				p.Kill(fmt.Sprintf("no heartbeat for %s (--stub-heartbeat-timeout)", age.Round(time.Millisecond)))
			} else if age > unhealthyAfter {
				p.host.Unhealthy()
			}
			if limit := p.cfg.ExecuteTimeout; limit > 0 {
				p.mu.Lock()
				since := p.execSince
				p.mu.Unlock()
				if !since.IsZero() && now.Sub(since) > limit {
					p.log.Error("execute exceeded its timeout; killing the stub", "timeout", limit)
					p.Kill(fmt.Sprintf("execute ran longer than EXECUTE_TIMEOUT_MS=%d", limit.Milliseconds()))
				}
			}
			if p.hasWork() {
				shortUntil = now.Add(watchTrail)
			}
			if now.Before(shortUntil) {
				tick.Reset(watchInterval)
			} else {
				p.watchIdle.Store(true)
				tick.Reset(untilGrid(time.Now(), idle))
			}
		}
	}
}

// kickWatch brings an idle watchdog back to its short period (an
// Execute is starting); one atomic load when it is not idle.
func (p *Proc) kickWatch() {
	if p.watchIdle.Load() && p.watchIdle.CompareAndSwap(true, false) {
		select {
		case p.watchKick <- struct{}{}:
		default:
		}
	}
}

// idleWatch is the watchdog's period while the stub is idle: the stub's
// heartbeat period (ipc.HeartbeatPeriodFor, a tenth of the timeout, at
// most 3 s), so a silent stub is killed at most one period after
// --stub-heartbeat-timeout, and shorter when the model's execute timeout
// needs a quicker first look at an execute that began meanwhile.
func (p *Proc) idleWatch() time.Duration {
	d := ipc.HeartbeatPeriodFor(p.cfg.HeartbeatTimeout)
	if limit := p.cfg.ExecuteTimeout; limit > 0 {
		d = min(d, max(watchInterval, limit/4))
	}
	return max(d, watchInterval)
}

// untilGrid is the time from now to the next multiple of period since
// the epoch: the idle watchdogs of every stub with the same period fire
// together, so the Go runtime wakes once for all of them rather than once
// for each (an idle server's wake-ups are mostly timers).
func untilGrid(now time.Time, period time.Duration) time.Duration {
	return period - time.Duration(now.UnixNano()%int64(period))
}

// hasWork reports whether the stub holds requests, runs an execute or has
// releases held back for it: then the watchdog keeps its short period.
func (p *Proc) hasWork() bool {
	p.mu.Lock()
	work := len(p.batches) > 0 || len(p.requests) > 0 || !p.execSince.IsZero()
	p.mu.Unlock()
	p.relMu.Lock()
	work = work || len(p.relOffs) > 0
	p.relMu.Unlock()
	return work
}

// drainIdle reads what the stub sent while no caller was reading (logs
// from its own threads, frees).
func (p *Proc) drainIdle() {
	select {
	case <-p.lead:
	default:
		return // a reader is at work
	}
	defer func() { p.lead <- struct{}{} }()
	if err := p.drain(); !errors.Is(err, ipc.ErrTimeout) {
		p.transportFailed(err)
	}
}

const (
	watchInterval = 50 * time.Millisecond
	// watchTrail is how long the watchdog keeps its short period after
	// the stub's last work: a log line or a release the stub sends just
	// after a request ends is read within watchInterval.
	watchTrail     = time.Second
	unhealthyAfter = 3 * time.Second
)

// Stop finalizes the model in the stub and ends the process, all by
// deadline: Finalize while time remains, then SIGKILL. It returns when the
// process is reaped and its region released (or, if a response still
// aliases the region, at the deadline).
func (p *Proc) Stop(deadline time.Time) {
	if p.Alive() {
		if left := time.Until(deadline); left > 0 {
			if _, err := p.Call(func(id uint64) ipc.Message { return &ipc.FinalizeMsg{ID: id} }, left); err != nil && !errors.Is(err, ErrStubExited) {
				p.log.Warn("finalize", "error", err)
			}
			t := time.NewTimer(max(time.Until(deadline), 0))
			select {
			case <-p.exited:
			case <-t.C:
			}
			t.Stop()
		}
		if p.Alive() {
			p.Kill("stopped")
		}
	}
	<-p.exited
	// The region goes once the receiver is done and no response aliases
	// it; a client still holding a response delays that, within a bound.
	t := time.NewTimer(max(time.Until(deadline), releaseGrace))
	defer t.Stop()
	select {
	case <-p.released:
	case <-t.C:
		p.log.Warn("stub region still referenced by unreleased responses after stop")
	}
}

// releaseGrace is the least time stop waits for responses to let go of a
// stopped stub's region.
const releaseGrace = 100 * time.Millisecond

// Retire makes the stub take no more work: Dispatch ends and TakeSlot
// refuses, while what it was sent runs to its end (the instance replaces
// it, then stops it). It is idempotent.
func (p *Proc) Retire() { p.retireOnce.Do(func() { close(p.retired); p.endServing() }) }

// Retired reports whether Retire was called.
func (p *Proc) Retired() bool {
	select {
	case <-p.retired:
		return true
	default:
		return false
	}
}

// Healthy reports whether this incarnation proved itself, which resets the
// restart backoff.
func (p *Proc) Healthy() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.okExecs > 0 || time.Since(p.started) > stableAfter
}

const stableAfter = 30 * time.Second

// Exited is closed once the process is reaped and its region marked dead.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Cause is why the process ended; valid once Exited is closed.
func (p *Proc) Cause() string { return p.cause }

// Started is when the process was started.
func (p *Proc) Started() time.Time { return p.started }

// PID is the stub's process id.
func (p *Proc) PID() int { return p.pid }

// Log is the logger of the stub's instance.
func (p *Proc) Log() hclog.Logger { return p.log }

// Status fills a stub's row on the status page with what the process
// knows: uptime, requests in flight, busy, and the region's rings and pool.
func (p *Proc) Status(st *backendapi.StubStatus) {
	st.PID = p.pid
	st.Uptime = time.Since(p.started)
	st.InFlight = p.InFlight()
	if st.State == backendapi.StubReady && p.Busy() {
		st.State = backendapi.StubBusy
	}
	if p.Alive() {
		st.RingDepthIn, st.RingDepthOut = p.conn.Depths()
		own, peer := p.conn.Usage()
		st.PoolInUse = own.InUse + peer.InUse
		st.PoolCapacity = own.Committed + peer.Committed
		st.PoolHighWater = own.HighWater + peer.HighWater
	}
}

// ReadyFn reports whether the model defines its own readiness check
// (is_ready()), as its Initialize answer said.
func (p *Proc) ReadyFn() bool { return p.readyFn }

// SetReadyFn records ReadyFn, before the process serves.
func (p *Proc) SetReadyFn(b bool) { p.readyFn = b }
