package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/backendapi/modelconfig"
	"github.com/stubvisor/stubvisor/ipc"
	"github.com/stubvisor/stubvisor/supervisor/sched"
	"github.com/stubvisor/stubvisor/supervisor/signature"
	"github.com/stubvisor/stubvisor/supervisor/stubproc"
)

// modelVersion is one loaded version of a model: its configuration, its
// instances and the queue that feeds them.
type modelVersion struct {
	sup        *Supervisor
	name       string
	version    int64
	dir        string // the model directory
	cfg        *inferencepb.ModelConfig
	configJSON string
	kind       string // modelconfig.KindPython or KindGo
	// modelFile is model.py (Python) or the model binary (Go).
	modelFile      string
	interpreter    string // Python models: the interpreter that runs the stub
	decoupled      bool
	forceCPUInputs bool
	executeTimeout time.Duration
	// limits bound its stubs' life and memory (recycle.go); envTook is
	// how long preparing its Python environment took.
	limits  stubLimits
	envTook time.Duration
	envVars []string // activate its EXECUTION_ENV_PATH (runtime.go)
	sig     *signature.Signature
	// steps are an ensemble's steps (the status page), and composing the
	// models they name; nil for other models.
	steps     []backendapi.EnsembleStep
	composing []string
	// labels are the classification labels of each output.
	labels map[string][]string

	// queue holds batches any instance may take (sched.NewQueue).
	queue chan *stubproc.Batch
	// gated: an instance waits for the rate limiter, so every batch goes
	// through the queues to its stub's dispatcher (ratelimit.go).
	gated     atomic.Bool
	scheduler sched.Scheduler
	instances []*instance
	stats     stats

	mu      sync.RWMutex
	closing bool
	active  sync.WaitGroup // requests between enqueue and their end
}

// newModelVersion prepares a version from a normalized, validated config.
func (s *Supervisor) newModelVersion(cfg *inferencepb.ModelConfig, dir string, version int64) (*modelVersion, error) {
	if modelconfig.IsEnsemble(cfg) {
		return s.newEnsembleVersion(cfg, dir, version)
	}
	js, err := modelconfig.ToJSON(cfg)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", cfg.GetName(), err)
	}
	mv := &modelVersion{
		sup: s, name: cfg.GetName(), version: version, dir: dir, cfg: cfg,
		configJSON: string(js),
		kind:       s.stubKind(cfg, dir),
		decoupled:  cfg.GetModelTransactionPolicy().GetDecoupled(),
		sig:        signature.New(cfg),
		queue:      sched.NewQueue(cfg),
	}
	mv.modelFile = s.modelFileOf(cfg, dir, version)
	if mv.labels, err = stubproc.ReadLabels(cfg, dir); err != nil {
		return nil, err
	}
	if v, ok := modelconfig.Parameter(cfg, "FORCE_CPU_ONLY_INPUT_TENSORS"); !ok || strings.EqualFold(v, "yes") {
		mv.forceCPUInputs = true
	}
	if v, ok := modelconfig.Parameter(cfg, "EXECUTE_TIMEOUT_MS"); ok && v != "" {
		ms, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return nil, backendapi.Errorf(backendapi.InvalidArg, "model '%s': parameter EXECUTE_TIMEOUT_MS must be a whole number of milliseconds, got %q", mv.name, v)
		}
		mv.executeTimeout = time.Duration(ms) * time.Millisecond
	}
	if mv.limits, err = parseStubLimits(cfg, s.opts); err != nil {
		return nil, err
	}
	switch mv.kind {
	case modelconfig.KindPython:
		env, err := s.pythonEnv(cfg, dir)
		if err != nil {
			return nil, err
		}
		mv.interpreter, mv.envTook, mv.envVars = env.python, env.prepare+env.probe, env.vars
		if _, err := os.Stat(mv.modelFile); errors.Is(err, fs.ErrNotExist) {
			return nil, errNoModelFile(mv.modelFile)
		} else if err != nil {
			return nil, backendapi.Errorf(backendapi.InvalidArg, "model '%s' version %d: %v", mv.name, version, err)
		}
	case modelconfig.KindGo:
		mv.modelFile, err = s.goModelBinary(mv)
		if err != nil {
			return nil, err
		}
	default:
		return nil, backendapi.Errorf(backendapi.InvalidArg, "model '%s': backend '%s' is not supported (use \"python\" or \"go\")", mv.name, mv.kind)
	}
	// As in Triton, a KIND_GPU group runs count instances on each of its
	// GPUs; other groups run count instances.
	for _, group := range cfg.GetInstanceGroup() {
		kind := strings.TrimPrefix(group.GetKind().String(), "KIND_")
		devices := []int32{0}
		if group.GetKind() == inferencepb.ModelInstanceGroup_KIND_GPU && len(group.GetGpus()) > 0 {
			devices = group.GetGpus()
		}
		n := 0
		for _, device := range devices {
			for range int(group.GetCount()) {
				mv.instances = append(mv.instances, newInstance(mv, fmt.Sprintf("%s_%d", group.GetName(), n), kind, int(device), group.GetRateLimiter()))
				n++
			}
		}
	}
	mv.scheduler, err = sched.New(sched.Model{Name: mv.name, Version: version, Config: cfg, Log: s.log}, mv)
	if err != nil {
		return nil, err
	}
	return mv, nil
}

// start launches every instance in parallel; it fails if any fails, and
// then stops the others.
func (mv *modelVersion) start() error {
	if err := mv.registerRateLimits(); err != nil {
		mv.scheduler.Stop() // nothing else was started
		return err
	}
	errs := make([]error, len(mv.instances))
	var wg sync.WaitGroup
	for i, inst := range mv.instances {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = inst.start()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			mv.stop(time.Now().Add(mv.sup.opts.FinalizeTimeout))
			return err
		}
	}
	return nil
}

// stop refuses new requests and ends the version by deadline: queued and
// running requests may finish until then; what still runs at the deadline
// fails (its stub is killed), and every instance is finalized with the
// time that remains (at most --stub-finalize-timeout) and then killed.
func (mv *modelVersion) stop(deadline time.Time) {
	mv.mu.Lock()
	already := mv.closing
	mv.closing = true
	mv.mu.Unlock()
	if already {
		return
	}
	drained := make(chan struct{})
	go func() { mv.active.Wait(); close(drained) }()
	t := time.NewTimer(max(time.Until(deadline), 0))
	select {
	case <-drained:
	case <-t.C:
		mv.sup.log.Warn("requests still running at the stop deadline; they fail", "model", mv.name)
		for _, inst := range mv.instances {
			if p := inst.liveProc(); p != nil && p.Busy() {
				p.Kill("model stopped while the execute was still running")
			}
		}
	}
	t.Stop()
	mv.scheduler.Stop()
	finalizeBy := time.Now().Add(mv.sup.opts.FinalizeTimeout)
	if finalizeBy.After(deadline) {
		finalizeBy = deadline
	}
	var wg sync.WaitGroup
	for _, inst := range mv.instances {
		wg.Add(1)
		go func() { defer wg.Done(); inst.stop(finalizeBy) }()
	}
	wg.Wait()
	mv.unregisterRateLimits()
	// Anything still queued has no stub left to run it.
	mv.scheduler.FailQueued(backendapi.Errorf(backendapi.Unavailable, "model '%s' was unloaded before the request ran", mv.name))
}

// submit validates a request and queues it.
func (mv *modelVersion) submit(ctx context.Context, req *backendapi.InferRequest, stream func(*backendapi.InferResponse, error, bool)) (*stubproc.Request, error) {
	return mv.submitTo(ctx, req, stream, false)
}

// enter counts a request into the version's active count (unloading waits
// for it to reach zero), unless the version is being unloaded. The caller
// calls mv.active.Done when the request ends.
func (mv *modelVersion) enter() error {
	mv.mu.RLock()
	defer mv.mu.RUnlock()
	if mv.closing {
		return backendapi.Errorf(backendapi.Unavailable, "model '%s' version %d is being unloaded", mv.name, mv.version)
	}
	mv.active.Add(1)
	return nil
}

// submitTo is submit; with own, stream takes over every response it gets
// and releases it itself (an ensemble keeps a step's outputs in the
// stub's arena until the steps that read them are done).
func (mv *modelVersion) submitTo(ctx context.Context, req *backendapi.InferRequest, stream func(*backendapi.InferResponse, error, bool), own bool) (*stubproc.Request, error) {
	n, err := mv.sig.Validate(req)
	if err != nil {
		return nil, err
	}
	pr := stubproc.NewRequest(ctx, req, n, stream, own)
	if err := mv.enter(); err != nil {
		return nil, err
	}
	if err := mv.scheduler.Enqueue(pr); err != nil {
		mv.active.Done()
		return nil, err
	}
	return pr, nil
}

// abandon ends a request whose caller gave up (err says why): it is marked
// abandoned and cancelled, the caller leaves (waiting for a copy of the
// inputs under way; none starts after), and finish, not respond, ends it:
// whoever ends the request first takes it off the version's active count,
// or unloading waits for it in vain. Another goroutine that ended it first
// may still be in its final call until pr.Done() closes.
func (mv *modelVersion) abandon(pr *stubproc.Request, err error) {
	pr.Abandon()
	mv.Finish(pr, nil, err, true)
}

// Finish records the end of a response and hands it over; a response nobody
// wants any more (or a streamed one, after its callback) is released.
func (mv *modelVersion) Finish(pr *stubproc.Request, resp *backendapi.InferResponse, err error, final bool) {
	if pr.Filler() {
		resp.Release()
		pr.Respond(nil, nil, true)
		return
	}
	pr.TraceResponse(final)
	mv.End(pr, resp, err, final)
}

// End is Finish without a stub's trace timestamps (ensemble.Host): the
// statistics, then the caller; a response nobody takes is released.
func (mv *modelVersion) End(pr *stubproc.Request, resp *backendapi.InferResponse, err error, final bool) {
	// Statistics are recorded before the caller hears of the end, so a
	// client (or an ensemble) that reads them after its response sees
	// this request counted.
	if pr.ClaimStats(err, final) {
		total, queue, compute := pr.Durations(time.Now())
		mv.stats.requestDone(err, pr.Size(), total, queue, compute)
	}
	taken, ended := pr.Respond(resp, err, final)
	if !taken {
		resp.Release()
	}
	if ended {
		mv.active.Done()
	}
}

// failQueuedIfNoStub fails queued requests when no instance has a live
// stub, so requests do not wait on a model that cannot start.
func (mv *modelVersion) failQueuedIfNoStub(cause error) {
	for _, inst := range mv.instances {
		if inst.ready() {
			return
		}
	}
	mv.scheduler.FailQueued(backendapi.Errorf(backendapi.Unavailable, "model '%s' has no running stub: %v", mv.name, cause))
}

// The model version is its scheduler's sched.Dispatch.

// Take implements sched.Dispatch: a pipeline slot of the instance with
// the most free ones, when no batch is queued before it, so the caller
// sends its request itself.
func (mv *modelVersion) Take() sched.Runner {
	if len(mv.queue) > 0 || mv.gated.Load() {
		return nil
	}
	var best *stubproc.Proc
	for _, inst := range mv.instances {
		if p := inst.liveProc(); p != nil && (best == nil || p.FreeSlots() > best.FreeSlots()) {
			best = p
		}
	}
	if best == nil || !best.TakeSlot() {
		return nil
	}
	return best
}

// Queue implements sched.Dispatch.
func (mv *modelVersion) Queue() chan *stubproc.Batch { return mv.queue }

// Instances implements sched.Dispatch.
func (mv *modelVersion) Instances() []sched.Instance {
	out := make([]sched.Instance, len(mv.instances))
	for i, inst := range mv.instances {
		out[i] = inst
	}
	return out
}

// unavailableReason says why no instance of the version can serve: each
// instance's last exit cause or failed restart.
func (mv *modelVersion) unavailableReason() string {
	var causes []string
	for _, inst := range mv.instances {
		if c := inst.lastCause(); c != "" {
			causes = append(causes, inst.name+": "+c)
		}
	}
	if len(causes) == 0 {
		return "no stub is running"
	}
	return "no stub is running (" + strings.Join(causes, "; ") + ")"
}

// ready reports whether the version can serve: its scheduler says (at
// least one instance has a live stub; an ensemble always can, its steps
// answer for their models).
func (mv *modelVersion) ready() bool { return mv.scheduler.Ready() }

// stubProcessName is the name of Triton's Python stub executable; it is
// in the command line of every Python stub.
const stubProcessName = "triton_python_backend_stub"

// command builds the stub process for inst.
func (mv *modelVersion) command(inst *instance) (*exec.Cmd, error) {
	env := append(os.Environ(), ipc.InstanceEnv+"="+inst.name, ipc.ModelEnv+"="+mv.name,
		ipc.HeartbeatEnv+"="+strconv.FormatInt(ipc.HeartbeatPeriodFor(mv.sup.opts.HeartbeatTimeout).Milliseconds(), 10))
	switch mv.kind {
	case modelconfig.KindPython:
		pydir, err := mv.sup.pythonDir()
		if err != nil {
			return nil, err
		}
		path := pydir
		if old := os.Getenv("PYTHONPATH"); old != "" {
			path += string(os.PathListSeparator) + old
		}
		// The stub's command line names it as Triton's does, for the
		// scripts that find stubs with pgrep -f triton_python_backend_stub.
		cmd := exec.Command(mv.interpreter, "-m", "stubvisor", stubProcessName, inst.name)
		cmd.Env = append(append(env, mv.envVars...), "PYTHONPATH="+path, "PYTHONUNBUFFERED=1")
		if mv.limits.cudaVisible && inst.kind == "GPU" {
			cmd.Env = append(cmd.Env, "CUDA_VISIBLE_DEVICES="+strconv.Itoa(inst.device))
		}
		return cmd, nil
	case modelconfig.KindGo:
		cmd := exec.Command(mv.modelFile)
		cmd.Env = env
		return cmd, nil
	}
	return nil, fmt.Errorf("command: backend %q", mv.kind)
}

// diagnose adds a hint to a stub that failed before its handshake.
func (mv *modelVersion) diagnose() string {
	if mv.kind != modelconfig.KindPython {
		return ""
	}
	out, err := exec.Command(mv.interpreter, "-c", "import numpy, msgpack").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("; hint: %s cannot import numpy and msgpack (%s); install python3-numpy and python3-msgpack or pass --python", mv.interpreter, strings.TrimSpace(lastLine(string(out))))
	}
	return ""
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// errNoModelFile is Triton's text for a Python model without its model.py.
func errNoModelFile(path string) error {
	return backendapi.Errorf(backendapi.Internal, "Failed to preinitialize Python stub: Python model file not found in '%s'", path)
}
