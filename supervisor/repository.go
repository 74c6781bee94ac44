package supervisor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/backendapi/modelconfig"
	"github.com/stubvisor/stubvisor/ipc"
	"github.com/stubvisor/stubvisor/supervisor/ensemble"
	"github.com/stubvisor/stubvisor/supervisor/signature"
	"github.com/stubvisor/stubvisor/supervisor/stubproc"
)

// loadStartupModels registers every model of the repositories and loads
// the ones the control mode asks for; StartupFailures names those that
// failed.
func (s *Supervisor) loadStartupModels() error {
	dirs, err := modelconfig.ScanRepository(s.opts.Repositories)
	if err != nil {
		return fmt.Errorf("supervisor: %w", err)
	}
	s.mu.Lock()
	for _, d := range dirs {
		s.models[d.Name] = &modelEntry{name: d.Name, dir: d.Path}
	}
	s.mu.Unlock()
	var names []string
	switch {
	case s.opts.ModelControl != ControlExplicit || slices.Contains(s.opts.StartupModels, "*"):
		for _, d := range dirs {
			names = append(names, d.Name)
		}
	default:
		names = s.opts.StartupModels
	}
	// Ensembles load after the models they run.
	var models, ensembles []string
	for _, n := range names {
		if s.isEnsembleDir(dirs, n) {
			ensembles = append(ensembles, n)
		} else {
			models = append(models, n)
		}
	}
	for _, group := range [][]string{models, ensembles} {
		// Load in parallel: each model's stubs start independently.
		sem := make(chan struct{}, 4)
		var wg sync.WaitGroup
		for _, n := range group {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if err := s.load(n, backendapi.LoadOptions{}); err != nil {
					s.logLoadFailure(n, err)
					s.mu.Lock()
					s.startupFailed = append(s.startupFailed, n)
					s.mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	return nil
}

// isEnsembleDir reports whether the named model's config.pbtxt declares an
// ensemble (a config that cannot be read is left for load to report).
func (s *Supervisor) isEnsembleDir(dirs []modelconfig.ModelDir, name string) bool {
	for _, d := range dirs {
		if d.Name == name && d.Err == nil {
			cfg, err := modelconfig.Read(d.Path)
			return err == nil && modelconfig.IsEnsemble(cfg)
		}
	}
	return false
}

// errControlMode is Triton's text for load/unload outside explicit mode.
var errControlMode = backendapi.Errorf(backendapi.Unavailable, "explicit model load / unload is not allowed if polling is enabled")

// LoadModel implements backendapi.Backend.
func (s *Supervisor) LoadModel(_ context.Context, name string, opts backendapi.LoadOptions) error {
	if s.opts.ModelControl != ControlExplicit {
		return errControlMode
	}
	if err := checkModelName(name); err != nil {
		return err
	}
	if len(opts.Files) > 0 && opts.ConfigJSON == "" {
		return backendapi.Errorf(backendapi.InvalidArg, "failed to load '%s', the model configuration must be provided when model files are provided", name)
	}
	// The failure is logged as well as answered, as Triton does (its tests
	// read the server log for it).
	err := s.load(name, opts)
	if err != nil {
		s.logLoadFailure(name, err)
	}
	return err
}

// UnloadModel implements backendapi.Backend. Unloading an ensemble leaves
// its composing models loaded unless unloadDependents asks otherwise; then
// those that no other loaded ensemble runs are unloaded too, as in Triton.
func (s *Supervisor) UnloadModel(_ context.Context, name string, unloadDependents bool) error {
	if s.opts.ModelControl != ControlExplicit {
		return errControlMode
	}
	s.mu.RLock()
	e, known := s.models[name]
	var deps []string
	if known && unloadDependents && e.cfg != nil && modelconfig.IsEnsemble(e.cfg) && len(e.versions) > 0 {
		deps = ensemble.Dependencies(e.cfg)
	}
	s.mu.RUnlock()
	if !known {
		return backendapi.Errorf(backendapi.InvalidArg, "failed to unload '%s', no version is available", name)
	}
	s.unload(name, reasonUnloaded)
	for _, d := range deps {
		if !s.usedByEnsemble(d) {
			s.unload(d, reasonUnloaded)
		}
	}
	return nil
}

// usedByEnsemble reports whether a loaded ensemble runs the model.
func (s *Supervisor) usedByEnsemble(model string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, e := range s.models {
		for _, mv := range e.versions {
			if slices.Contains(mv.composing, model) {
				return true
			}
		}
	}
	return false
}

// unload stops every version of a model.
func (s *Supervisor) unload(name, reason string) {
	if !s.loads.lock(name) {
		return // shutting down: Close stops every model
	}
	defer s.loads.unlock(name)
	s.mu.Lock()
	e := s.models[name]
	if e == nil {
		s.mu.Unlock()
		return
	}
	old := e.versions
	e.versions = nil
	if e.state != backendapi.ModelNotLoaded {
		e.state, e.reason = backendapi.ModelUnloading, ""
	}
	s.mu.Unlock()
	for _, mv := range old {
		mv.stop(s.unloadDeadline())
	}
	s.mu.Lock()
	if e.state != backendapi.ModelNotLoaded {
		e.state, e.reason = backendapi.ModelUnavailable, reason
	}
	s.mu.Unlock()
	s.log.Info("model unloaded", "model", name)
}

// load loads (or reloads) a model. A reload that fails leaves the
// previous versions serving.
func (s *Supervisor) load(name string, opts backendapi.LoadOptions) error {
	if s.closing.Load() {
		return backendapi.Errorf(backendapi.Unavailable, "server is shutting down")
	}
	return s.lockAndLoad(name, opts, nil)
}

// lockAndLoad takes name's load lock and loads it. A load holds only its
// own model's lock, so a model's initialize may load another model, and
// an ensemble's load takes the locks of the composing models it loads.
func (s *Supervisor) lockAndLoad(name string, opts backendapi.LoadOptions, chain []string) error {
	if !s.loads.lock(name) {
		return backendapi.Errorf(backendapi.Unavailable, "server is shutting down")
	}
	defer s.loads.unlock(name)
	return s.loadLocked(name, opts, chain)
}

// loadLocked is load with name's load lock held. chain lists the ensembles
// whose load asked for this one, to refuse a cycle.
func (s *Supervisor) loadLocked(name string, opts backendapi.LoadOptions, chain []string) (retErr error) {
	dir, err := s.modelDir(name)
	// A model that is not in any repository is created from a load request
	// that brings its config and files, as in Triton.
	if err != nil && !(errors.Is(err, errNotInRepository) && len(opts.Files) > 0) {
		if errors.Is(err, errNotInRepository) {
			return pollFailed(name)
		}
		return err
	}
	if len(opts.Files) > 0 {
		if dir, err = s.writeOverride(name, opts.Files); err != nil {
			return err
		}
	}
	s.mu.Lock()
	e := s.models[name]
	if e == nil {
		e = &modelEntry{name: name}
		s.models[name] = e
	}
	e.dir = dir
	prevState, prevReason := e.state, e.reason
	e.state, e.reason = backendapi.ModelLoading, ""
	s.mu.Unlock()
	setState := func(state backendapi.ModelState, reason string) {
		s.mu.Lock()
		e.state, e.reason = state, reason
		s.mu.Unlock()
	}
	defer func() {
		if retErr != nil {
			s.mu.RLock()
			serving := len(e.versions) > 0
			s.mu.RUnlock()
			if serving && prevState == backendapi.ModelReady {
				setState(prevState, prevReason)
			} else {
				setState(backendapi.ModelUnavailable, backendapi.MessageOf(retErr))
			}
			retErr = backendapi.Errorf(backendapi.CodeOf(retErr), "failed to load '%s': %s", name, backendapi.MessageOf(retErr))
		}
	}()
	s.log.Info("loading model", "model", name, "dir", dir)
	cfg, err := s.readConfig(name, dir, opts.ConfigJSON)
	if err != nil {
		return err
	}
	if modelconfig.IsEnsemble(cfg) {
		if err := s.loadDependencies(name, cfg, append(chain, name)); err != nil {
			return err
		}
	}
	versions, err := modelconfig.Versions(cfg, dir)
	if err != nil {
		return err
	}
	var mvs []*modelVersion
	for _, v := range versions {
		mv, err := s.newModelVersion(cfg, dir, v)
		if err != nil {
			return err
		}
		mvs = append(mvs, mv)
	}
	for i, mv := range mvs {
		if err := mv.start(); err != nil {
			for _, started := range mvs[:i] {
				started.stop(s.unloadDeadline())
			}
			return err
		}
	}
	s.mu.Lock()
	old := e.versions
	e.versions, e.cfg = mvs, cfg
	e.state, e.reason = backendapi.ModelReady, ""
	e.fingerprint = fingerprint(dir)
	s.mu.Unlock()
	for _, mv := range old {
		mv.stop(s.unloadDeadline())
	}
	s.log.Info("model ready", "model", name, "versions", versions)
	return nil
}

// loadDependencies loads, in explicit mode, the composing models of an
// ensemble that are not loaded yet, as Triton does (in the other modes
// every model loads, ensembles last).
func (s *Supervisor) loadDependencies(name string, cfg *inferencepb.ModelConfig, chain []string) error {
	if s.opts.ModelControl != ControlExplicit {
		return nil
	}
	for _, dep := range ensemble.Dependencies(cfg) {
		if slices.Contains(chain, dep) {
			return backendapi.Errorf(backendapi.InvalidArg, "circular dependency between ensembles: %s -> %s", strings.Join(chain, " -> "), dep)
		}
		s.mu.RLock()
		e := s.models[dep]
		loaded := e != nil && e.state == backendapi.ModelReady && len(e.versions) > 0
		s.mu.RUnlock()
		if loaded {
			continue
		}
		if err := s.lockAndLoad(dep, backendapi.LoadOptions{}, chain); err != nil {
			return backendapi.Errorf(backendapi.InvalidArg, "ensemble '%s' depends on '%s' which has no loaded version. Model '%s' loading failed with error: %s", name, dep, dep, backendapi.MessageOf(err))
		}
	}
	return nil
}

// modelDir finds a model's directory in the repositories.
func (s *Supervisor) modelDir(name string) (string, error) {
	dirs, err := modelconfig.ScanRepository(s.opts.Repositories)
	if err != nil {
		return "", backendapi.Errorf(backendapi.Internal, "%v", err)
	}
	for _, d := range dirs {
		if d.Name == name {
			if d.Err != nil {
				return "", backendapi.Errorf(backendapi.InvalidArg, "%v", d.Err)
			}
			return d.Path, nil
		}
	}
	return "", errNotInRepository
}

// errNotInRepository is the reason a model no repository holds cannot be
// loaded; a load answers it with pollFailed.
var errNotInRepository = backendapi.Errorf(backendapi.InvalidArg, "failed to poll from model repository")

// pollFailed is Triton's answer (an internal error) to a load of a model
// that no repository holds, or whose file overrides cannot be written.
func pollFailed(name string) error {
	return backendapi.Errorf(backendapi.Internal, "failed to load '%s', failed to poll from model repository", name)
}

// readConfig reads config.pbtxt (or the override), runs the model's
// auto_complete_config when it has one, and normalizes and validates the
// result.
func (s *Supervisor) readConfig(name, dir, overrideJSON string) (*inferencepb.ModelConfig, error) {
	var cfg *inferencepb.ModelConfig
	var err error
	if overrideJSON != "" {
		cfg, err = modelconfig.FromJSON([]byte(overrideJSON))
		if err != nil {
			return nil, backendapi.Errorf(backendapi.InvalidArg, "Invalid config override: %s", backendapi.MessageOf(err))
		}
	} else {
		cfg, err = modelconfig.Read(dir)
	}
	if err != nil {
		return nil, err
	}
	if cfg.GetName() != "" && cfg.GetName() != name {
		return nil, backendapi.Errorf(backendapi.InvalidArg, "%s: name: unexpected model name '%s', expecting '%s' (the directory name)", filepath.Join(dir, modelconfig.ConfigFileName), cfg.GetName(), name)
	}
	cfg.Name = name
	backendFile, err := s.pythonBackendFile(cfg, dir)
	if err != nil {
		return nil, err
	}
	if backendFile != "" || modelconfig.Kind(cfg) == modelconfig.KindPython {
		if strings.ContainsAny(name, stubNameInvalidChars) {
			return nil, backendapi.Errorf(backendapi.InvalidArg, "Invalid stub name: contains invalid characters")
		}
		if s.opts.AutoCompleteConfig {
			if cfg, err = s.autoComplete(cfg, dir, backendFile); err != nil {
				return nil, err
			}
		}
	}
	check := func() error {
		modelconfig.Normalize(cfg, dir, gpuOptions(cfg)...)
		return modelconfig.Validate(cfg)
	}
	if backendFile != "" {
		err = asPython(cfg, check)
	} else {
		err = check()
	}
	if err != nil {
		return nil, err
	}
	return cfg, nil
}

// stubNameInvalidChars are the characters Triton's Python backend refuses
// in a stub's name (the model's name), as a guard for the shell.
const stubNameInvalidChars = ";|&$`<>()[]{}\\\"'*?~#!"

// autoComplete runs TritonPythonModel.auto_complete_config in a throwaway
// stub, as Triton does, when the model defines it. backendFile is the
// model.py of a Python-based backend, or "" for the model's own.
func (s *Supervisor) autoComplete(cfg *inferencepb.ModelConfig, dir, backendFile string) (*inferencepb.ModelConfig, error) {
	modelFile := backendFile
	if modelFile == "" {
		versions, err := modelconfig.Versions(&inferencepb.ModelConfig{}, dir) // the latest version directory
		if err != nil {
			return nil, err
		}
		file := cfg.GetDefaultModelFilename()
		if file == "" {
			file = modelconfig.DefaultPythonModelFile
		}
		modelFile = filepath.Join(dir, strconv.FormatInt(versions[len(versions)-1], 10), file)
	}
	src, err := os.ReadFile(modelFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errNoModelFile(modelFile)
	}
	if err != nil {
		return nil, backendapi.Errorf(backendapi.InvalidArg, "model '%s': %v", cfg.GetName(), err)
	}
	if !bytes.Contains(src, []byte("auto_complete_config")) {
		return cfg, nil
	}
	interp, err := s.interpreterFor(cfg, dir)
	if err != nil {
		return nil, err
	}
	mv := &modelVersion{sup: s, name: cfg.GetName(), dir: dir, kind: modelconfig.KindPython, modelFile: modelFile, interpreter: interp, sig: &signature.Signature{}}
	inst := newInstance(mv, cfg.GetName()+"_autocomplete", "CPU", 0, nil)
	p, err := stubproc.Spawn(inst.procConfig(), inst)
	if err != nil {
		return nil, err
	}
	defer func() { p.Kill("auto-complete done"); <-p.Exited() }()
	js, err := modelconfig.ToJSON(cfg)
	if err != nil {
		return nil, err
	}
	res, err := p.Call(func(id uint64) ipc.Message {
		return &ipc.AutoCompleteMsg{ID: id, Options: map[string]any{"model_file": modelFile}, ConfigJSON: string(js)}
	}, s.opts.InitializeTimeout)
	if err != nil {
		return nil, err
	}
	if res.Error != nil {
		return nil, stubproc.ResultError(res.Error)
	}
	out, ok := res.Value.(string)
	if !ok {
		return nil, backendapi.Errorf(backendapi.Internal, "auto_complete_config of model '%s' returned %T, want a config", cfg.GetName(), res.Value)
	}
	completed, err := modelconfig.FromJSON([]byte(out))
	if err != nil {
		return nil, backendapi.Errorf(backendapi.InvalidArg, "auto_complete_config of model '%s' produced an invalid config: %s", cfg.GetName(), backendapi.MessageOf(err))
	}
	return completed, nil
}

// unloadDeadline bounds the stop of an unloaded version: requests may run
// for one --stub-finalize-timeout, and finalize has at least as long.
func (s *Supervisor) unloadDeadline() time.Time {
	return time.Now().Add(2 * s.opts.FinalizeTimeout)
}

// RepositoryIndex implements backendapi.Backend.
func (s *Supervisor) RepositoryIndex(_ context.Context, readyOnly bool) ([]backendapi.ModelIndexEntry, error) {
	dirs, err := modelconfig.ScanRepository(s.opts.Repositories)
	if err != nil {
		return nil, backendapi.Errorf(backendapi.Internal, "%v", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	seen := map[string]bool{}
	var out []backendapi.ModelIndexEntry
	add := func(name string) {
		seen[name] = true
		e := s.models[name]
		if e == nil || e.state == backendapi.ModelNotLoaded {
			if !readyOnly {
				out = append(out, backendapi.ModelIndexEntry{Name: name})
			}
			return
		}
		if len(e.versions) == 0 {
			if !readyOnly {
				state, why := e.stateOf(nil)
				out = append(out, backendapi.ModelIndexEntry{Name: name, State: state, Reason: why})
			}
			return
		}
		for _, mv := range e.versions {
			state, why := e.stateOf(mv)
			if readyOnly && state != backendapi.ModelReady {
				continue
			}
			out = append(out, backendapi.ModelIndexEntry{Name: name, Version: strconv.FormatInt(mv.version, 10), State: state, Reason: why})
		}
	}
	for _, d := range dirs {
		add(d.Name)
	}
	for name := range s.models {
		if !seen[name] {
			add(name)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// poll reloads models whose files changed, loads new ones and unloads
// removed ones (--model-control-mode=poll).
func (s *Supervisor) poll() {
	defer s.pollWG.Done()
	t := time.NewTicker(s.opts.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stopc:
			return
		case <-t.C:
		}
		dirs, err := modelconfig.ScanRepository(s.opts.Repositories)
		if err != nil {
			s.log.Error("repository poll", "error", err)
			continue
		}
		present := map[string]bool{}
		for _, d := range dirs {
			present[d.Name] = true
			s.mu.RLock()
			e := s.models[d.Name]
			changed := e == nil || e.fingerprint != fingerprint(d.Path)
			s.mu.RUnlock()
			if changed {
				if err := s.load(d.Name, backendapi.LoadOptions{}); err != nil {
					s.logLoadFailure(d.Name, err)
				}
			}
		}
		s.mu.RLock()
		var gone []string
		for n := range s.models {
			if !present[n] {
				gone = append(gone, n)
			}
		}
		s.mu.RUnlock()
		for _, n := range gone {
			s.unload(n, "removed from the repository")
			s.mu.Lock()
			delete(s.models, n)
			s.mu.Unlock()
		}
	}
}

// fingerprint summarises the names, sizes and times of a model's files.
func fingerprint(dir string) string {
	h := sha256.New()
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() && d.Name() == "__pycache__" {
			if d != nil && d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if info, err := d.Info(); err == nil && !d.IsDir() {
			fmt.Fprintf(h, "%s %d %d\n", path, info.Size(), info.ModTime().UnixNano())
		}
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))
}

// StartupFailures returns the names of the models that failed to load at
// start, sorted (the server exits on them under --exit-on-error, as
// tritonserver does).
func (s *Supervisor) StartupFailures() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := slices.Clone(s.startupFailed)
	slices.Sort(names)
	return names
}

// logLoadFailure logs why a model failed to load as the line's message,
// where its text stands as it is (a key's value would have its quotes
// escaped), so that a search of the log for Triton's text finds it, as
// NVIDIA's tests search tritonserver's.
func (s *Supervisor) logLoadFailure(name string, err error) {
	s.log.Error(backendapi.MessageOf(err), "model", name)
}
