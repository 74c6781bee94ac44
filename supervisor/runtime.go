package supervisor

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/backendapi/modelconfig"
)

// prepMu serialises building Go models, which share a cache directory.
var prepMu sync.Mutex

// interpreterFor returns the Python interpreter of a model after checking
// it (pythonEnv).
func (s *Supervisor) interpreterFor(cfg *inferencepb.ModelConfig, dir string) (string, error) {
	env, err := s.pythonEnv(cfg, dir)
	return env.python, err
}

// pyEnvInfo is a model's Python environment, ready for its stubs.
type pyEnvInfo struct {
	python string
	// root is the environment's directory, "" for the server's
	// interpreter; vars activate it (pyenv.Env.Vars).
	root    string
	vars    []string
	version string // the interpreter's, "3.11.2"
	// prepare is how long finding or unpacking the environment took,
	// probe how long the interpreter check ran.
	prepare, probe time.Duration
}

// pythonEnv prepares a model's Python: the server's, or bin/python3 of the
// model's EXECUTION_ENV_PATH (a directory, a venv, or a .tar.gz/.tgz/.tar
// packed environment unpacked once per content hash into the cache; see
// package pyenv). "$$TRITON_MODEL_DIRECTORY" in the path is the model
// directory, as in Triton. The interpreter is then checked (its version
// and numpy), so a wrong one fails the load with what is wrong instead of
// a stub that dies at start.
func (s *Supervisor) pythonEnv(cfg *inferencepb.ModelConfig, dir string) (pyEnvInfo, error) {
	info := pyEnvInfo{python: s.opts.Python}
	env, ok := modelconfig.Parameter(cfg, modelconfig.ParamExecutionEnvPath)
	if ok && env != "" {
		env = strings.ReplaceAll(env, "$$TRITON_MODEL_DIRECTORY", dir)
		if !filepath.IsAbs(env) {
			env = filepath.Join(dir, env)
		}
		prepared, err := s.envs.Prepare(env)
		if err != nil {
			return info, backendapi.Errorf(backendapi.InvalidArg, "model '%s': EXECUTION_ENV_PATH: %v", cfg.GetName(), err)
		}
		if prepared.Unpacked {
			s.log.Info("unpacked execution environment", "model", cfg.GetName(), "archive", env, "dir", prepared.Root, "took", prepared.Took)
		}
		info.python, info.root, info.prepare, info.vars = prepared.Python, prepared.Root, prepared.Took, prepared.Vars()
	}
	it, err := s.envs.Check(info.python, info.vars...)
	if err != nil {
		return info, backendapi.Errorf(backendapi.InvalidArg, "model '%s': %v", cfg.GetName(), err)
	}
	info.version, info.probe = it.Version, it.Took
	return info, nil
}

// goModelBinary returns the executable of a Go-native model version: the
// file named by default_model_filename in the version directory, or, when
// that is absent and the directory holds Go sources, a binary built from
// them with the Go toolchain into the cache (rebuilt when a source changes).
func (s *Supervisor) goModelBinary(mv *modelVersion) (string, error) {
	if info, err := os.Stat(mv.modelFile); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
		return mv.modelFile, nil
	}
	vdir := filepath.Join(mv.dir, strconv.FormatInt(mv.version, 10))
	sources, _ := filepath.Glob(filepath.Join(vdir, "*.go"))
	if len(sources) == 0 {
		return "", backendapi.Errorf(backendapi.InvalidArg, "model '%s' version %d: no executable %s and no Go sources to build one from", mv.name, mv.version, mv.modelFile)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		if _, statErr := os.Stat("/usr/local/go/bin/go"); statErr == nil {
			goTool = "/usr/local/go/bin/go"
		} else {
			return "", backendapi.Errorf(backendapi.InvalidArg, "model '%s' version %d: %s is missing and no Go toolchain is installed to build it from the sources", mv.name, mv.version, mv.modelFile)
		}
	}
	h := sha256.New()
	// The model links the stub library of this very server: a rebuilt
	// server must rebuild its models too.
	if exe, err := os.Executable(); err == nil {
		if info, err := os.Stat(exe); err == nil {
			fmt.Fprintf(h, "%s %d %d\n", exe, info.Size(), info.ModTime().UnixNano())
		}
	}
	for _, src := range sources {
		b, err := os.ReadFile(src)
		if err != nil {
			return "", backendapi.Errorf(backendapi.InvalidArg, "model '%s': %v", mv.name, err)
		}
		h.Write([]byte(src))
		h.Write(b)
	}
	out := filepath.Join(s.opts.CacheDir, "gomodels", mv.name+"-"+hex.EncodeToString(h.Sum(nil))[:16])
	prepMu.Lock()
	defer prepMu.Unlock()
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", backendapi.Errorf(backendapi.Internal, "model '%s': %v", mv.name, err)
	}
	s.log.Info("building Go model", "model", mv.name, "version", mv.version, "dir", vdir)
	cmd := exec.Command(goTool, "build", "-o", out+".tmp", ".")
	cmd.Dir = vdir
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", backendapi.Errorf(backendapi.InvalidArg, "model '%s' version %d: go build failed: %s", mv.name, mv.version, strings.TrimSpace(string(b)))
	}
	if err := os.Rename(out+".tmp", out); err != nil {
		return "", backendapi.Errorf(backendapi.Internal, "model '%s': %v", mv.name, err)
	}
	return out, nil
}
