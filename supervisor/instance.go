package supervisor

import (
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/ipc"
	"github.com/stubvisor/stubvisor/supervisor/ratelimit"
	"github.com/stubvisor/stubvisor/supervisor/sched"
	"github.com/stubvisor/stubvisor/supervisor/stubproc"
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
	direct     chan *stubproc.Batch
	executions atomic.Uint64
	// requests counts the requests the instance's stubs have executed;
	// reqBase is the count when the current stub became ready (under mu).
	requests atomic.Uint64
	reqBase  uint64
	// warmups are the warmup requests in flight (warmup.go): they count
	// in the model's statistics, as Triton's warmup requests do, but not
	// in the stub's own counts (/v2/stubs shows the warmup apart).
	// warmExecs is how many executions still to leave out of those: one
	// per warmup request sent. (While a replacement warms up, the stub it
	// replaces still serves, so the instance cannot tell its ends apart by
	// the time they come.)
	warmups   sync.Map // *stubproc.Request -> struct{}
	warmExecs atomic.Int64
	// readiness runs the model's own is_ready() (readiness.go).
	readiness userReadiness
	// rateLimit is the group's rate_limiter (nil: none); limited is the
	// instance's registration with the rate limiter while its version
	// runs, nil when it is not limited (ratelimit.go).
	rateLimit *inferencepb.ModelRateLimiter
	limited   atomic.Pointer[ratelimit.Instance]

	mu       sync.Mutex
	state    backendapi.StubState
	proc     *stubproc.Proc
	restarts int
	lastExit string
	lastBeat time.Time
	stopping bool
	// recycling: a replacement is being prepared (recycle.go); recycles
	// counts the stubs replaced so, lastRecycle says why the last was.
	recycling   bool
	recycles    int
	lastRecycle string
	// steps are how long the current stub's load took, step by step.
	steps backendapi.LoadSteps

	// swapc hands supervise a warm replacement (recycle.go); bg counts
	// the recycle and retire goroutines, which stop waits for.
	swapc chan swap
	bg    sync.WaitGroup
	stopc chan struct{}
	done  chan struct{}
}

func newInstance(mv *modelVersion, name, kind string, device int, rateLimit *inferencepb.ModelRateLimiter) *instance {
	return &instance{
		mv: mv, name: name, kind: kind, device: device, rateLimit: rateLimit,
		log:    mv.sup.log.Named(name),
		direct: make(chan *stubproc.Batch, 64),
		state:  backendapi.StubStarting, swapc: make(chan swap),
		stopc: make(chan struct{}), done: make(chan struct{}),
	}
}

// procConfig is what each of the instance's stubs is spawned with.
func (inst *instance) procConfig() stubproc.Config {
	mv, opts := inst.mv, inst.mv.sup.opts
	var confine func(*exec.Cmd) (stubproc.Confinement, error)
	if mv.limits.memory > 0 {
		confine = inst.confine
	}
	depth, gate := sched.PipelineDepth(mv.cfg, len(mv.instances)), inst.gate()
	if inst.limited.Load() != nil {
		// The grant covers one execute: a second queued behind it in the
		// ring would wait for the first's resources anyway.
		depth = 1
	}
	return stubproc.Config{
		Instance: inst.name, Model: mv.name, Version: mv.version, Kind: mv.kind,
		Decoupled: mv.decoupled, Batched: mv.sig.MaxBatch() > 0, Labels: mv.labels,
		ExecuteTimeout: mv.executeTimeout, PipelineDepth: depth, Gate: gate,
		IPC: opts.IPC, StartTimeout: opts.StubStartTimeout, HeartbeatTimeout: opts.HeartbeatTimeout,
		Regions: &mv.sup.shm, Launcher: mv.sup.launcher, Log: inst.log,
		Command:  func() (*exec.Cmd, error) { return mv.command(inst) },
		Diagnose: mv.diagnose, Confine: confine, MaxRequests: mv.limits.maxRequests,
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

// launch spawns a stub, initializes the model in it and makes it the
// instance's stub.
func (inst *instance) launch() (*stubproc.Proc, error) {
	inst.setState(backendapi.StubStarting)
	p, steps, err := inst.prepare()
	if err != nil {
		return nil, err
	}
	inst.install(p, steps, "")
	return p, nil
}

// prepare spawns a stub and initializes the model in it, timing each step.
func (inst *instance) prepare() (*stubproc.Proc, backendapi.LoadSteps, error) {
	steps := backendapi.LoadSteps{EnvironmentS: inst.mv.envTook.Seconds()}
	start := time.Now()
	p, err := stubproc.Spawn(inst.procConfig(), inst)
	if err != nil {
		return nil, steps, err
	}
	steps.InterpreterStartS = time.Since(start).Seconds()
	mv := inst.mv
	// A stop does not wait for an initialize: it kills the stub.
	initialized := make(chan struct{})
	go func() {
		select {
		case <-inst.stopc:
			p.Kill("stopped during initialize")
		case <-initialized:
		}
	}()
	res, err := p.Call(func(id uint64) ipc.Message {
		return &ipc.InitializeMsg{ID: id, Args: mv.initArgs(inst), Options: mv.stubOptions()}
	}, mv.sup.opts.InitializeTimeout)
	close(initialized)
	if err == nil && res.Error != nil {
		err = stubproc.ResultError(res.Error)
	}
	if err != nil {
		p.Kill("initialize failed")
		<-p.Exited()
		return nil, steps, err
	}
	p.SetReadyFn(hasReadyFn(res.Value))
	steps.ImportsS, steps.InitializeS = initTimes(res.Value)
	took, err := inst.warmup(p)
	if err != nil {
		inst.log.Error("warmup failed", "error", backendapi.MessageOf(err))
		p.Kill("warmup failed")
		<-p.Exited()
		return nil, steps, err
	}
	steps.WarmupS = took.Seconds()
	return p, steps, nil
}

// install makes p the instance's stub; cause is why it replaces the one
// before ("" for a first start or a restart).
func (inst *instance) install(p *stubproc.Proc, steps backendapi.LoadSteps, cause string) {
	inst.mu.Lock()
	inst.proc = p
	inst.reqBase = inst.requests.Load()
	inst.state = backendapi.StubReady
	inst.lastBeat = time.Now()
	inst.steps = steps
	if cause != "" {
		inst.recycles++
		inst.lastRecycle = cause
	}
	inst.mu.Unlock()
	inst.log.Info("stub ready", "pid", p.PID(), "environment_s", steps.EnvironmentS, "interpreter_start_s", steps.InterpreterStartS,
		"imports_s", steps.ImportsS, "initialize_s", steps.InitializeS, "warmup_s", steps.WarmupS)
}

// initTimes reads the import and initialize times a Python stub reports
// in its Initialize answer (0 when it reports none).
func initTimes(v any) (imports, initialize float64) {
	m, _ := v.(map[string]any)
	imports, _ = m["import_s"].(float64)
	initialize, _ = m["initialize_s"].(float64)
	return imports, initialize
}

// supervise serves with p and replaces it when it dies.
func (inst *instance) supervise(p *stubproc.Proc) {
	defer close(inst.done)
	opts := inst.mv.sup.opts
	backoff := opts.RestartBackoff
	for {
		go p.Dispatch()
		select {
		case <-p.Exited():
		case sw := <-inst.swapc:
			// A recycle: the warm replacement serves from now on, the old
			// stub drains and finalizes.
			inst.install(sw.next, sw.steps, sw.cause)
			inst.bg.Add(1)
			go inst.retire(p)
			p = sw.next
			continue
		case <-inst.stopc:
			return // stop() finalizes p
		}
		inst.mu.Lock()
		inst.restarts++
		inst.lastExit = p.Cause()
		inst.state = backendapi.StubRestarting
		inst.proc = nil
		inst.mu.Unlock()
		if p.Healthy() {
			backoff = opts.RestartBackoff
		}
		inst.log.Error("stub died; restarting", "pid", p.PID(), "cause", p.Cause(), "backoff", backoff)
	restart:
		for {
			select {
			case <-time.After(backoff):
			case sw := <-inst.swapc:
				// A recycle begun before the death brings its replacement.
				inst.install(sw.next, sw.steps, sw.cause)
				p = sw.next
				break restart
			case <-inst.stopc:
				inst.setState(backendapi.StubStopped)
				return
			}
			backoff = min(backoff*2, opts.RestartBackoffMax)
			np, err := inst.launch()
			if err == nil {
				p = np
				break restart
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
	inst.bg.Wait()
	inst.mu.Lock()
	p := inst.proc
	inst.proc = nil
	inst.mu.Unlock()
	if p != nil {
		p.Stop(deadline)
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
func (inst *instance) currentProc() *stubproc.Proc {
	inst.mu.Lock()
	defer inst.mu.Unlock()
	return inst.proc
}

// liveProc returns the instance's stub if it is alive, or nil.
func (inst *instance) liveProc() *stubproc.Proc {
	if p := inst.currentProc(); p != nil && p.Alive() {
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
		Recycles:   inst.recycles, LastRecycleCause: inst.lastRecycle,
	}
	if p := inst.proc; p != nil {
		steps := inst.steps
		st.LoadSteps = &steps
	}
	st.Requests = inst.requests.Load() - inst.reqBase
	p := inst.proc
	beat := inst.lastBeat
	inst.mu.Unlock()
	st.MemoryLimit = inst.memoryLimitText()
	if reg := inst.limited.Load(); reg != nil {
		waited, _ := reg.Waited()
		st.RateLimitWaiting, st.RateLimitWaitS = reg.Waiting(), waited.Seconds()
	}
	if p == nil {
		return st
	}
	st.HeartbeatAge = time.Since(beat)
	p.Status(&st)
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

// An instance is the host of its stubs (stubproc.Host): what they need
// from the model reaches them through these methods.

// Finish implements stubproc.Host.
func (inst *instance) Finish(pr *stubproc.Request, resp *backendapi.InferResponse, err error, final bool) {
	if _, ok := inst.warmups.Load(pr); ok {
		if pr.ClaimStats(err, final) {
			total, queue, compute := pr.Durations(time.Now())
			inst.mv.stats.requestDone(err, pr.Size(), total, queue, compute)
		}
		if taken, _ := pr.Respond(resp, err, final); !taken {
			resp.Release()
		}
		return
	}
	inst.mv.Finish(pr, resp, err, final)
}

// Executed implements stubproc.Host.
func (inst *instance) Executed(size int64, d time.Duration) {
	inst.mv.Executed(size, d)
	for {
		n := inst.warmExecs.Load()
		if n <= 0 {
			break
		}
		if inst.warmExecs.CompareAndSwap(n, n-1) {
			return
		}
	}
	inst.executions.Add(1)
	inst.requests.Add(uint64(size))
}

// Direct implements stubproc.Host and sched.Instance.
func (inst *instance) Direct() chan *stubproc.Batch { return inst.direct }

// Name implements sched.Instance.
func (inst *instance) Name() string { return inst.name }

// Ready implements sched.Instance.
func (inst *instance) Ready() bool { return inst.ready() }

// Proc implements sched.Instance.
func (inst *instance) Proc() *stubproc.Proc { return inst.currentProc() }

// Queue implements stubproc.Host.
func (inst *instance) Queue() <-chan *stubproc.Batch { return inst.mv.queue }

// Heartbeat implements stubproc.Host.
func (inst *instance) Heartbeat(t time.Time) { inst.setHeartbeat(t) }

// Unhealthy implements stubproc.Host.
func (inst *instance) Unhealthy() { inst.setState(backendapi.StubUnhealthy) }

// Stopping implements stubproc.Host.
func (inst *instance) Stopping() bool { return inst.isStopping() }

// BLS implements stubproc.Host (bls.go).
func (inst *instance) BLS(p *stubproc.Proc, m *ipc.InferExecMsg, stop <-chan struct{}) {
	inst.mv.sup.bls(p, m, stop)
}

// BLSCancel implements stubproc.Host.
func (inst *instance) BLSCancel(p *stubproc.Proc, m *ipc.InferCancelMsg) {
	inst.mv.sup.blsReg.cancel(blsKey{p, m.ID}) // bls.go
}

// Control implements stubproc.Host (modelctl.go).
func (inst *instance) Control(p *stubproc.Proc, m *ipc.ModelControlMsg) {
	inst.mv.sup.modelControl(p, m)
}
