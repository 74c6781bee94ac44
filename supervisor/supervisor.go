package supervisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/backendapi/modelconfig"
	"github.com/stubvisor/stubvisor/ipc"
	"github.com/stubvisor/stubvisor/python"
	"github.com/stubvisor/stubvisor/supervisor/clientshm"
	"github.com/stubvisor/stubvisor/supervisor/memlimit"
	"github.com/stubvisor/stubvisor/supervisor/pyenv"
	"github.com/stubvisor/stubvisor/supervisor/ratelimit"
	"github.com/stubvisor/stubvisor/supervisor/respcache"
	"github.com/stubvisor/stubvisor/supervisor/stubproc"
)

// Model control modes (--model-control-mode).
const (
	ControlNone     = "none"
	ControlPoll     = "poll"
	ControlExplicit = "explicit"
)

// Options configure a Supervisor. Zero values take the defaults of
// DefaultOptions.
type Options struct {
	Repositories []string
	// ModelControl is ControlNone, ControlPoll or ControlExplicit.
	ModelControl string
	// StartupModels are loaded at start in explicit mode ("*" = all).
	StartupModels   []string
	PollInterval    time.Duration
	StrictReadiness bool
	AllowClientShm  bool
	// AutoCompleteConfig runs auto_complete_config of Python models.
	AutoCompleteConfig bool
	// ResponseCacheBytes is the size of the response cache; 0: no cache
	// (cache.go).
	ResponseCacheBytes uint64
	// RateLimit is --rate-limit=execution_count: instances of groups with
	// a rate_limiter wait for its resources (ratelimit.go);
	// RateLimitResources are the --rate-limit-resource counts.
	RateLimit          bool
	RateLimitResources []RateLimitResource
	// BackendDirectory holds the Python-based backends,
	// <dir>/<name>/model.py (pybackend.go).
	BackendDirectory string

	// Python is the interpreter for Python stubs (EXECUTION_ENV_PATH
	// overrides it per model).
	Python string
	// CacheDir holds the extracted stub files, unpacked execution
	// environments and built Go models.
	CacheDir string
	// IPC sizes each stub's rings and pool.
	IPC ipc.Settings

	// The server's defaults of the model parameters MAX_RSS_MB,
	// MAX_REQUESTS_PER_STUB, MAX_STUB_AGE_S and MEMORY_LIMIT_MB (0: none;
	// recycle.go). MemoryLimitMethod forces how the memory limit is
	// enforced (memlimit.Method; "": the best the host allows).
	MaxRSSMB           uint64
	MaxRequestsPerStub uint64
	MaxStubAge         time.Duration
	MemoryLimitMB      uint64
	MemoryLimitMethod  string

	StubStartTimeout  time.Duration // from spawn to the stub's Hello
	InitializeTimeout time.Duration // initialize(args)
	HeartbeatTimeout  time.Duration // a stub silent this long is killed
	FinalizeTimeout   time.Duration // finalize() at unload and shutdown
	RestartBackoff    time.Duration // first delay before restarting a dead stub
	RestartBackoffMax time.Duration // the cap of the exponential backoff

	Logger hclog.Logger
}

// DefaultOptions returns the defaults of every setting.
func DefaultOptions() Options {
	return Options{
		ModelControl:       ControlNone,
		PollInterval:       15 * time.Second,
		StrictReadiness:    true,
		AutoCompleteConfig: true,
		Python:             "/usr/bin/python3",
		IPC:                ipc.DefaultSettings(),
		StubStartTimeout:   30 * time.Second,
		InitializeTimeout:  10 * time.Minute,
		HeartbeatTimeout:   30 * time.Second,
		FinalizeTimeout:    5 * time.Second,
		RestartBackoff:     100 * time.Millisecond,
		RestartBackoffMax:  10 * time.Second,
	}
}

// Supervisor implements backendapi.Backend.
type Supervisor struct {
	opts     Options
	log      hclog.Logger
	launcher *stubproc.Launcher

	mu     sync.RWMutex
	models map[string]*modelEntry // every model seen in a repository or loaded
	// startupFailed names the models that failed to load at start.
	startupFailed []string
	// loads serialises load and unload per model name (loadlock.go).
	loads loadLocks

	closing atomic.Bool
	stopc   chan struct{}
	pollWG  sync.WaitGroup
	// sampleWG waits for sampleLoop, which fills hist (sampler.go).
	sampleWG sync.WaitGroup
	hist     histories

	// envs prepares and checks models' Python environments (runtime.go).
	envs *pyenv.Cache

	// mem enforces MEMORY_LIMIT_MB, chosen once (memory.go).
	memOnce sync.Once
	mem     *memlimit.Limiter
	memErr  error

	pyOnce sync.Once
	pyDir  string
	pyErr  error

	// shm is the registry of client shared-memory regions (package clientshm).
	shm clientshm.Registry
	// bls is the registry of BLS requests in flight (bls.go).
	blsReg blsCalls
	// cache is the response cache, nil without one (cache.go).
	cache *respcache.Cache
	// limiter is the rate limiter, nil when it is off (ratelimit.go).
	limiter *ratelimit.Limiter
}

var _ backendapi.Backend = (*Supervisor)(nil)

// modelEntry is what the supervisor knows of one model name.
type modelEntry struct {
	name string
	dir  string
	// state and reason are the model's load state as load and unload
	// leave it; what the model shows is stateOf's derivation.
	state  backendapi.ModelState
	reason string
	cfg    *inferencepb.ModelConfig
	// versions are the loaded versions, ascending.
	versions []*modelVersion
	// fingerprint identifies the files the loaded model came from (poll).
	fingerprint string
}

// stateOf is the state a model version shows everywhere (the repository
// index, readiness, metrics and the stub status), and why. It is the
// entry's load state, except that a READY version none of whose instances
// has a live stub is UNAVAILABLE, with the last cause its instances gave
// (a crash, a failed restart) as the reason. mv is nil for a model with no
// loaded version. Called with s.mu held.
func (e *modelEntry) stateOf(mv *modelVersion) (backendapi.ModelState, string) {
	if mv != nil && e.state == backendapi.ModelReady && !mv.ready() {
		return backendapi.ModelUnavailable, mv.unavailableReason()
	}
	return e.state, e.reason
}

// blocksReadiness reports whether a model in state st (for reason why)
// makes a strictly ready server not ready: one loading, or one that is
// unavailable for any reason but an unload on request, as in Triton.
func blocksReadiness(st backendapi.ModelState, why string) bool {
	return st == backendapi.ModelLoading || (st == backendapi.ModelUnavailable && why != reasonUnloaded)
}

// New starts a supervisor and loads the models the control mode asks for.
// Models that fail to load are reported in the repository index; New fails
// only when the repositories themselves cannot be read.
func New(opts Options) (*Supervisor, error) {
	d := DefaultOptions()
	if opts.ModelControl == "" {
		opts.ModelControl = d.ModelControl
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = d.PollInterval
	}
	if opts.Python == "" {
		opts.Python = d.Python
	}
	if opts.IPC.RingBytes == 0 {
		opts.IPC = d.IPC
	}
	for _, dd := range []struct {
		v   *time.Duration
		def time.Duration
	}{
		{&opts.StubStartTimeout, d.StubStartTimeout}, {&opts.InitializeTimeout, d.InitializeTimeout},
		{&opts.HeartbeatTimeout, d.HeartbeatTimeout}, {&opts.FinalizeTimeout, d.FinalizeTimeout},
		{&opts.RestartBackoff, d.RestartBackoff}, {&opts.RestartBackoffMax, d.RestartBackoffMax},
	} {
		if *dd.v <= 0 {
			*dd.v = dd.def
		}
	}
	if opts.CacheDir == "" {
		opts.CacheDir = filepath.Join(os.TempDir(), "stubvisor-"+strconv.Itoa(os.Getuid()))
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	switch opts.ModelControl {
	case ControlNone, ControlPoll, ControlExplicit:
	default:
		return nil, fmt.Errorf("supervisor: model control mode %q: want none, poll or explicit", opts.ModelControl)
	}
	s := &Supervisor{
		opts: opts, log: opts.Logger, launcher: stubproc.NewLauncher(),
		models: map[string]*modelEntry{}, stopc: make(chan struct{}),
		envs: pyenv.NewCache(opts.CacheDir),
	}
	s.shm.Log = opts.Logger
	if opts.ResponseCacheBytes > 0 {
		s.cache = respcache.New(opts.ResponseCacheBytes)
	}
	s.limiter = newRateLimiter(opts)
	if err := s.loadStartupModels(); err != nil {
		return nil, err
	}
	if opts.ModelControl == ControlPoll {
		s.pollWG.Add(1)
		go s.poll()
	}
	s.sampleWG.Add(1)
	go s.sampleLoop()
	return s, nil
}

// Close stops accepting requests and ends everything within timeout: the
// running requests may finish until then, what still runs fails, every
// model is finalized with the time that remains and every stub killed. It
// is idempotent.
func (s *Supervisor) Close(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	if s.closing.Swap(true) {
		return
	}
	close(s.stopc)
	s.pollWG.Wait()
	s.sampleWG.Wait()
	s.loads.close()
	s.mu.Lock()
	var all []*modelVersion
	for _, e := range s.models {
		all = append(all, e.versions...)
		e.versions = nil
		e.state, e.reason = backendapi.ModelUnavailable, "server shutting down"
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, mv := range all {
		wg.Add(1)
		go func() { defer wg.Done(); mv.stop(deadline) }()
	}
	wg.Wait()
	s.shm.CloseAll()
	s.launcher.Stop() // every stub is reaped: the thread that forked them may go
}

// pythonDir extracts the embedded Python stub once.
func (s *Supervisor) pythonDir() (string, error) {
	s.pyOnce.Do(func() {
		s.pyDir, s.pyErr = python.Extract(filepath.Join(s.opts.CacheDir, "python"))
	})
	return s.pyDir, s.pyErr
}

// CPUPolicy is how the supervisor's threads and its stubs compete for the
// CPU (stubproc.CPUPolicy).
type CPUPolicy = stubproc.CPUPolicy

// The CPU policies: stubproc.PolicyLatency and stubproc.PolicyBatch say
// what each does.
const (
	PolicyLatency = stubproc.PolicyLatency
	PolicyBatch   = stubproc.PolicyBatch
)

// ErrUnknownPolicy is returned by SetCPUPolicy for a policy it does not
// know.
var ErrUnknownPolicy = stubproc.ErrUnknownPolicy

// SetCPUPolicy puts this process's threads, and the stubs started after
// it, under policy. Call it before New.
func SetCPUPolicy(policy CPUPolicy) error { return stubproc.SetCPUPolicy(policy) }

// Live implements backendapi.Backend.
func (s *Supervisor) Live() bool { return !s.closing.Load() }

// Ready implements backendapi.Backend: with strict readiness, every model
// that is meant to be loaded must be ready.
func (s *Supervisor) Ready() bool {
	if s.closing.Load() {
		return false
	}
	if !s.opts.StrictReadiness {
		return true
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, e := range s.models {
		if len(e.versions) == 0 {
			if blocksReadiness(e.stateOf(nil)) {
				return false
			}
			continue
		}
		for _, mv := range e.versions {
			if blocksReadiness(e.stateOf(mv)) {
				return false
			}
		}
	}
	return true
}

// reasonUnloaded is the index reason of a model unloaded on request.
const reasonUnloaded = "unloaded"

// errUnknownModel is Triton's text for a model that is not loaded.
func errUnknownModel(name string, known bool) error {
	code := backendapi.InvalidArg
	if known {
		code = backendapi.NotFound
	}
	return backendapi.Errorf(code, "Request for unknown model: '%s' is not found", name)
}

// lookup finds the version that serves a request (version 0: the latest
// loaded one).
func (s *Supervisor) lookup(name string, version int64) (*modelVersion, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e := s.models[name]
	if e == nil || e.state == backendapi.ModelNotLoaded {
		return nil, errUnknownModel(name, e != nil)
	}
	if len(e.versions) == 0 {
		if e.state == backendapi.ModelUnavailable && e.reason != reasonUnloaded {
			return nil, backendapi.Errorf(backendapi.Unavailable, "Request for unknown model: '%s' has no available versions", name)
		}
		return nil, errUnknownModel(name, true)
	}
	if version == 0 {
		return e.versions[len(e.versions)-1], nil
	}
	for _, mv := range e.versions {
		if mv.version == version {
			return mv, nil
		}
	}
	return nil, backendapi.Errorf(backendapi.NotFound, "Request for unknown model: '%s' version %d is not found", name, version)
}

// ModelReady implements backendapi.Backend.
func (s *Supervisor) ModelReady(_ context.Context, name string, version int64) error {
	mv, err := s.lookup(name, version)
	if err != nil {
		return err
	}
	if !mv.ready() {
		return backendapi.Errorf(backendapi.Unavailable, "Model '%s' version %d is not ready: %s", name, mv.version, mv.unavailableReason())
	}
	return mv.userReady()
}

// ModelMetadata implements backendapi.Backend.
func (s *Supervisor) ModelMetadata(_ context.Context, name string, version int64) (*backendapi.ModelMetadata, error) {
	mv, err := s.lookup(name, version)
	if err != nil {
		return nil, err
	}
	s.mu.RLock()
	var versions []int64
	for _, v := range s.models[name].versions {
		if v.ready() {
			versions = append(versions, v.version)
		}
	}
	s.mu.RUnlock()
	md := modelconfig.Metadata(mv.cfg, versions)
	return &md, nil
}

// ModelConfig implements backendapi.Backend.
func (s *Supervisor) ModelConfig(_ context.Context, name string, version int64) (*inferencepb.ModelConfig, error) {
	mv, err := s.lookup(name, version)
	if err != nil {
		return nil, err
	}
	return mv.cfg, nil
}

// ModelStatistics implements backendapi.Backend.
func (s *Supervisor) ModelStatistics(_ context.Context, name string, version int64) ([]backendapi.ModelStatistics, error) {
	var mvs []*modelVersion
	if name == "" {
		s.mu.RLock()
		for _, e := range s.models {
			mvs = append(mvs, e.versions...)
		}
		s.mu.RUnlock()
	} else {
		mv, err := s.lookup(name, version)
		if err != nil {
			return nil, err
		}
		if version == 0 {
			s.mu.RLock()
			mvs = append(mvs, s.models[name].versions...)
			s.mu.RUnlock()
		} else {
			mvs = []*modelVersion{mv}
		}
	}
	out := make([]backendapi.ModelStatistics, 0, len(mvs))
	for _, mv := range mvs {
		st := mv.stats.snapshot(mv.name, strconv.FormatInt(mv.version, 10))
		s.cacheStats(&st, mv)
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Version < out[j].Version
	})
	return out, nil
}

// Infer implements backendapi.Backend.
func (s *Supervisor) Infer(ctx context.Context, req *backendapi.InferRequest) (*backendapi.InferResponse, error) {
	mv, err := s.lookup(req.ModelName, req.ModelVersion)
	if err != nil {
		return nil, err
	}
	if mv.decoupled {
		return nil, backendapi.ErrDecoupled
	}
	if key, ok := s.cacheKey(mv, req); ok {
		return s.inferCached(ctx, mv, req, key)
	}
	pr, err := mv.submit(ctx, req, nil)
	if err != nil {
		return nil, err
	}
	pr.NotifyQueued()
	return pr.Wait()
}

// InferStream implements backendapi.Backend.
func (s *Supervisor) InferStream(ctx context.Context, req *backendapi.InferRequest, send func(*backendapi.InferResponse, error, bool)) error {
	mv, err := s.lookup(req.ModelName, req.ModelVersion)
	if err != nil {
		return err
	}
	pr, err := mv.submit(ctx, req, send)
	if err != nil {
		return err
	}
	pr.NotifyQueued()
	if !pr.Await() {
		// The stub may still answer; respond drops what comes after the
		// final call, and the caller must not be called after we return.
		mv.abandon(pr, backendapi.Errorf(backendapi.Cancelled, "request for model '%s' cancelled: %v", req.ModelName, ctx.Err()))
		// When another goroutine ended the request first, it may still be
		// inside send: done closes after its final call returns.
		<-pr.Done()
	}
	return nil
}

// Stubs implements backendapi.Backend.
func (s *Supervisor) Stubs(_ context.Context, model string) ([]backendapi.ModelStubs, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []backendapi.ModelStubs
	names := make([]string, 0, len(s.models))
	for n := range s.models {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		e := s.models[n]
		if model != "" && n != model {
			continue
		}
		if len(e.versions) == 0 {
			st, why := e.stateOf(nil)
			if st == backendapi.ModelNotLoaded {
				st = backendapi.ModelUnknown
			}
			out = append(out, backendapi.ModelStubs{Model: n, State: st, Reason: why, Stubs: []backendapi.StubStatus{}})
			continue
		}
		for _, mv := range e.versions {
			st, why := e.stateOf(mv)
			ms := backendapi.ModelStubs{Model: n, Version: strconv.FormatInt(mv.version, 10), State: st, Reason: why,
				Stubs: make([]backendapi.StubStatus, 0, len(mv.instances)), Steps: mv.steps}
			for _, inst := range mv.instances {
				st := inst.status()
				withProcStat(&st)
				ms.Stubs = append(ms.Stubs, st)
			}
			ms.History = s.hist.of(mv)
			out = append(out, ms)
		}
	}
	if model != "" && len(out) == 0 {
		return nil, errUnknownModel(model, false)
	}
	return out, nil
}
