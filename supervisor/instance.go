package supervisor

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc"
)

// instance is one model instance: a slot that always wants a live stub.
// Its supervise loop replaces a stub that dies, with exponential backoff,
// until the instance is stopped.
type instance struct {
	mv     *modelVersion
	name   string // Triton's instance name, <model>_<group>_<index>
	kind   string // "CPU", "GPU" or "MODEL"
	device int
	log    hclog.Logger
	// direct carries batches that must run on this instance (sequences).
	direct     chan *batch
	executions atomic.Uint64
	// readiness runs the model's own is_ready() (readiness.go).
	readiness userReadiness

	mu       sync.Mutex
	state    backendapi.StubState
	proc     *stubProc
	restarts int
	lastExit string
	lastBeat time.Time
	stopping bool

	stopc chan struct{}
	done  chan struct{}
}

func newInstance(mv *modelVersion, name, kind string, device int) *instance {
	return &instance{
		mv: mv, name: name, kind: kind, device: device,
		log:    mv.sup.log.Named(name),
		direct: make(chan *batch, 64),
		state:  backendapi.StubStarting,
		stopc:  make(chan struct{}), done: make(chan struct{}),
	}
}

// start launches the first stub. An error here is a load error of the
// model; afterwards the instance keeps itself alive.
func (inst *instance) start() error {
	p, err := inst.launch()
	if err != nil {
		inst.setState(backendapi.StubStopped)
		close(inst.done)
		return err
	}
	go inst.supervise(p)
	return nil
}

// launch spawns a stub and initializes the model in it.
func (inst *instance) launch() (*stubProc, error) {
	inst.setState(backendapi.StubStarting)
	p, err := inst.spawn()
	if err != nil {
		return nil, err
	}
	mv := inst.mv
	// A stop does not wait for an initialize: it kills the stub.
	initialized := make(chan struct{})
	go func() {
		select {
		case <-inst.stopc:
			p.kill("stopped during initialize")
		case <-initialized:
		}
	}()
	res, err := p.call(func(id uint64) ipc.Message {
		return &ipc.InitializeMsg{ID: id, Args: mv.initArgs(inst), Options: mv.stubOptions()}
	}, mv.sup.opts.InitializeTimeout)
	close(initialized)
	if err == nil && res.Error != nil {
		err = resultError(res.Error)
	}
	if err != nil {
		p.kill("initialize failed")
		<-p.exited
		return nil, err
	}
	p.readyFn = hasReadyFn(res.Value)
	inst.mu.Lock()
	inst.proc = p
	inst.state = backendapi.StubReady
	inst.lastBeat = time.Now()
	inst.mu.Unlock()
	inst.log.Info("stub ready", "pid", p.pid)
	return p, nil
}

// supervise serves with p and replaces it when it dies.
func (inst *instance) supervise(p *stubProc) {
	defer close(inst.done)
	opts := inst.mv.sup.opts
	backoff := opts.RestartBackoff
	for {
		go p.dispatch()
		select {
		case <-p.exited:
		case <-inst.stopc:
			return // stop() finalizes p
		}
		inst.mu.Lock()
		inst.restarts++
		inst.lastExit = p.cause
		inst.state = backendapi.StubRestarting
		inst.proc = nil
		inst.mu.Unlock()
		if p.healthy() {
			backoff = opts.RestartBackoff
		}
		inst.log.Error("stub died; restarting", "pid", p.pid, "cause", p.cause, "backoff", backoff)
		for {
			select {
			case <-time.After(backoff):
			case <-inst.stopc:
				inst.setState(backendapi.StubStopped)
				return
			}
			backoff = min(backoff*2, opts.RestartBackoffMax)
			np, err := inst.launch()
			if err == nil {
				p = np
				break
			}
			inst.mu.Lock()
			inst.lastExit = err.Error()
			inst.state = backendapi.StubRestarting
			inst.mu.Unlock()
			inst.log.Error("stub restart failed", "error", err, "backoff", backoff)
			inst.mv.failQueuedIfNoStub(err)
		}
	}
}

// stop ends the instance: no more restarts, Finalize, and the process
// reaped, all by deadline. It is idempotent.
func (inst *instance) stop(deadline time.Time) {
	inst.mu.Lock()
	first := !inst.stopping
	inst.stopping = true
	inst.mu.Unlock()
	if first {
		close(inst.stopc)
	}
	<-inst.done
	inst.mu.Lock()
	p := inst.proc
	inst.proc = nil
	inst.mu.Unlock()
	if p != nil {
		p.stop(deadline)
	}
	inst.setState(backendapi.StubStopped)
}

// isStopping reports whether stop was called: a stub that dies now is not
// restarted.
func (inst *instance) isStopping() bool {
	inst.mu.Lock()
	defer inst.mu.Unlock()
	return inst.stopping
}

func (inst *instance) setState(s backendapi.StubState) {
	inst.mu.Lock()
	if inst.state != backendapi.StubStopped || s == backendapi.StubStarting {
		inst.state = s
	}
	inst.mu.Unlock()
}

func (inst *instance) setHeartbeat(t time.Time) {
	inst.mu.Lock()
	inst.lastBeat = t
	if inst.state == backendapi.StubUnhealthy {
		inst.state = backendapi.StubReady
	}
	inst.mu.Unlock()
}

// lastCause is why the instance's last stub ended or its last restart
// failed ("" if neither happened).
func (inst *instance) lastCause() string {
	inst.mu.Lock()
	defer inst.mu.Unlock()
	return inst.lastExit
}

// currentProc is the instance's live stub, nil while it restarts.
func (inst *instance) currentProc() *stubProc {
	inst.mu.Lock()
	defer inst.mu.Unlock()
	return inst.proc
}

// liveProc returns the instance's stub if it is alive, or nil.
func (inst *instance) liveProc() *stubProc {
	if p := inst.currentProc(); p != nil && p.alive() {
		return p
	}
	return nil
}

// ready reports whether the instance has a live, initialized stub.
func (inst *instance) ready() bool { return inst.liveProc() != nil }

// status is the instance's row on the status page.
func (inst *instance) status() backendapi.StubStatus {
	inst.mu.Lock()
	st := backendapi.StubStatus{
		Instance: inst.name, Kind: inst.mv.kind, State: inst.state,
		Restarts: inst.restarts, LastExitCause: inst.lastExit,
		Executions: inst.executions.Load(),
	}
	p := inst.proc
	beat := inst.lastBeat
	inst.mu.Unlock()
	if p == nil {
		return st
	}
	st.PID = p.pid
	st.Uptime = time.Since(p.started)
	st.HeartbeatAge = time.Since(beat)
	st.InFlight = p.inFlight()
	if st.State == backendapi.StubReady && p.busy() {
		st.State = backendapi.StubBusy
	}
	if p.alive() {
		st.RingDepthIn, st.RingDepthOut = p.conn.Depths()
		own, peer := p.conn.Usage()
		st.PoolInUse = own.InUse + peer.InUse
		st.PoolCapacity = own.Committed + peer.Committed
		st.PoolHighWater = own.HighWater + peer.HighWater
	}
	return st
}

// initArgs are the seven keys Triton passes to initialize(args).
func (mv *modelVersion) initArgs(inst *instance) map[string]string {
	return map[string]string{
		"model_config":             mv.configJSON,
		"model_instance_kind":      inst.kind,
		"model_instance_name":      inst.name,
		"model_instance_device_id": strconv.Itoa(inst.device),
		"model_repository":         mv.dir,
		"model_version":            strconv.FormatInt(mv.version, 10),
		"model_name":               mv.name,
	}
}

func (mv *modelVersion) stubOptions() map[string]any {
	return map[string]any{
		"model_file":                   mv.modelFile,
		"decoupled":                    mv.decoupled,
		"force_cpu_only_input_tensors": mv.forceCPUInputs,
	}
}
