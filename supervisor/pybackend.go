package supervisor

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/backendapi/modelconfig"
)

// Python-based backends, as Triton's Python backend serves them: a config
// that says backend: "<name>" for a name other than python, go or an
// ensemble runs <backend-directory>/<name>/model.py in a Python stub (Triton's
// vLLM backend is one). The model's own directory is still its directory:
// args["model_repository"] and args["model_version"] point at it, which is
// where such a backend reads its settings (model.json for vLLM).

// pythonBackendFile is the model.py of the Python-based backend cfg names;
// "" when the config names python, go, or is an ensemble. The server's
// --backend-directory is searched first, then the backends/ directory of
// the model's own repository. A backend found in neither fails with
// Triton's text.
func (s *Supervisor) pythonBackendFile(cfg *inferencepb.ModelConfig, dir string) (string, error) {
	name := cfg.GetBackend()
	switch {
	case name == "" || name == modelconfig.KindPython || name == modelconfig.KindGo || modelconfig.IsEnsemble(cfg):
		return "", nil
	case name == "." || name == ".." || strings.ContainsAny(name, `/\`):
		return "", errNoBackend(name)
	}
	var places []string
	if s.opts.BackendDirectory != "" {
		places = append(places, s.opts.BackendDirectory)
	}
	places = append(places, filepath.Join(filepath.Dir(dir), "backends"))
	for _, p := range places {
		file := filepath.Join(p, name, modelconfig.DefaultPythonModelFile)
		if fi, err := os.Stat(file); err == nil && fi.Mode().IsRegular() {
			return file, nil
		}
	}
	return "", errNoBackend(name)
}

// errNoBackend is Triton's text for a backend it finds neither as a
// library nor as a Python-based backend.
func errNoBackend(name string) error {
	return backendapi.Errorf(backendapi.Unsupported,
		"unable to find backend library for backend '%s', try specifying runtime on the model configuration.", name)
}

// asPython runs f (normalize, validate) on cfg as if it named the python
// backend, then restores the backend's name, which the model's config keeps
// (Triton reports backend "vllm" for a vLLM model).
func asPython(cfg *inferencepb.ModelConfig, f func() error) error {
	name := cfg.Backend
	cfg.Backend = modelconfig.KindPython
	defer func() { cfg.Backend = name }()
	return f()
}

// stubKind is the kind of stub that runs a model: a Python-based backend's
// models run in Python stubs.
func (s *Supervisor) stubKind(cfg *inferencepb.ModelConfig, dir string) string {
	if file, _ := s.pythonBackendFile(cfg, dir); file != "" {
		return modelconfig.KindPython
	}
	return modelconfig.Kind(cfg)
}

// modelFileOf is the file a version's stub loads: the version directory's
// default_model_filename, or a Python-based backend's model.py.
func (s *Supervisor) modelFileOf(cfg *inferencepb.ModelConfig, dir string, version int64) string {
	if file, _ := s.pythonBackendFile(cfg, dir); file != "" {
		return file
	}
	return filepath.Join(dir, strconv.FormatInt(version, 10), cfg.GetDefaultModelFilename())
}
