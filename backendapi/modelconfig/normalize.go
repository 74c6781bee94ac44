package modelconfig

import (
	"path/filepath"
	"strconv"

	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

// The backends stubvisor runs, as named by ModelConfig.backend.
const (
	// KindPython runs model.py (TritonPythonModel) in a Python stub. It is
	// the default when a config names neither backend nor platform.
	KindPython = "python"
	// KindGo runs a Go-native model in a Go stub built from (or shipped as)
	// the files of the version directory.
	KindGo = "go"
)

// Default model file names, relative to a version directory.
const (
	DefaultPythonModelFile = "model.py"
	DefaultGoModelFile     = "model"
)

// Triton's default for sequence_batching.max_sequence_idle_microseconds.
const defaultSequenceIdleMicroseconds = 1000000

// Kind returns the backend that runs the model: cfg.backend, or
// cfg.platform when no backend is set (e.g. "ensemble"), or KindPython when
// neither is (the default Normalize applies).
func Kind(cfg *inferencepb.ModelConfig) string {
	switch {
	case cfg.GetBackend() != "":
		return cfg.GetBackend()
	case cfg.GetPlatform() != "":
		return cfg.GetPlatform()
	}
	return KindPython
}

// Parameter returns the string value of the model parameter key
// (config.pbtxt `parameters { key: "k" value { string_value: "v" } }`).
func Parameter(cfg *inferencepb.ModelConfig, key string) (string, bool) {
	p, ok := cfg.GetParameters()[key]
	if !ok {
		return "", false
	}
	return p.GetStringValue(), true
}

// Option adjusts Normalize.
type Option func(*options)

type options struct {
	gpus []int32
}

// WithGPUs tells Normalize which GPU ids the machine has. Without it
// Normalize assumes none: KIND_AUTO groups become KIND_CPU, and a KIND_GPU
// group that lists no GPUs stays empty (which Validate rejects, as Triton
// does on a machine without GPUs).
func WithGPUs(ids ...int) Option {
	return func(o *options) {
		o.gpus = o.gpus[:0]
		for _, id := range ids {
			o.gpus = append(o.gpus, int32(id))
		}
	}
}

// Normalize fills in, in place, the defaults Triton applies to a Python
// backend model, so that the config reported to clients and handed to the
// model looks like Triton's:
//
//   - name: the base name of modelDir when unset (and modelDir is not "");
//   - backend: KindPython when neither backend nor platform is set;
//   - default_model_filename: "model.py" (Python) or "model" (Go);
//   - version_policy: latest { num_versions: 1 } when unset;
//   - dynamic_batching / sequence_batching.oldest: preferred_batch_size
//     [max_batch_size] when none is listed and max_batch_size > 0;
//   - sequence_batching.max_sequence_idle_microseconds: 1000000 when 0;
//   - optimization.{input,output}_pinned_memory.enable: true when unset;
//   - instance_group: one group named after the model (count 1, KIND_CPU)
//     when there is none; in every group an unset name becomes
//     <model>_<index>, an unset (zero) count 1, KIND_AUTO becomes KIND_GPU
//     when GPUs are known (and all listed ones exist) or KIND_CPU, and a
//     KIND_GPU group without gpus gets every known GPU.
//
// Ensembles (ensemble_scheduling set) get no instance groups or
// optimization defaults, as in Triton. Normalize never fails; Validate
// afterwards reports what is wrong.
func Normalize(cfg *inferencepb.ModelConfig, modelDir string, opts ...Option) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if cfg.Name == "" && modelDir != "" {
		cfg.Name = filepath.Base(filepath.Clean(modelDir))
	}
	if cfg.Backend == "" && cfg.Platform == "" {
		cfg.Backend = KindPython
	}
	if cfg.Backend == KindEnsemble && cfg.Platform == "" {
		// backend: "ensemble" is accepted as a spelling of the platform.
		cfg.Platform, cfg.Backend = KindEnsemble, ""
	}
	if cfg.DefaultModelFilename == "" {
		switch cfg.Backend {
		case KindPython:
			cfg.DefaultModelFilename = DefaultPythonModelFile
		case KindGo:
			cfg.DefaultModelFilename = DefaultGoModelFile
		}
	}
	if cfg.VersionPolicy == nil {
		cfg.VersionPolicy = &inferencepb.ModelVersionPolicy{
			PolicyChoice: &inferencepb.ModelVersionPolicy_Latest_{
				Latest: &inferencepb.ModelVersionPolicy_Latest{NumVersions: 1},
			},
		}
	}
	if db := cfg.GetDynamicBatching(); db != nil && len(db.PreferredBatchSize) == 0 && cfg.MaxBatchSize > 0 {
		db.PreferredBatchSize = []int32{cfg.MaxBatchSize}
	}
	if sb := cfg.GetSequenceBatching(); sb != nil {
		if sb.MaxSequenceIdleMicroseconds == 0 {
			sb.MaxSequenceIdleMicroseconds = defaultSequenceIdleMicroseconds
		}
		if old := sb.GetOldest(); old != nil && len(old.PreferredBatchSize) == 0 && cfg.MaxBatchSize > 0 {
			old.PreferredBatchSize = []int32{cfg.MaxBatchSize}
		}
	}
	if cfg.GetEnsembleScheduling() != nil || cfg.Platform == KindEnsemble {
		return
	}
	if cfg.Optimization == nil {
		cfg.Optimization = &inferencepb.ModelOptimizationPolicy{}
	}
	if cfg.Optimization.InputPinnedMemory == nil {
		cfg.Optimization.InputPinnedMemory = &inferencepb.ModelOptimizationPolicy_PinnedMemoryBuffer{Enable: true}
	}
	if cfg.Optimization.OutputPinnedMemory == nil {
		cfg.Optimization.OutputPinnedMemory = &inferencepb.ModelOptimizationPolicy_PinnedMemoryBuffer{Enable: true}
	}
	if len(cfg.InstanceGroup) == 0 {
		cfg.InstanceGroup = []*inferencepb.ModelInstanceGroup{{
			Name:  cfg.Name,
			Kind:  inferencepb.ModelInstanceGroup_KIND_CPU,
			Count: 1,
		}}
	}
	for i, g := range cfg.InstanceGroup {
		if g.Name == "" {
			g.Name = cfg.Name + "_" + strconv.Itoa(i)
		}
		if g.Count == 0 {
			g.Count = 1
		}
		if g.Kind == inferencepb.ModelInstanceGroup_KIND_AUTO {
			g.Kind = inferencepb.ModelInstanceGroup_KIND_CPU
			if len(o.gpus) > 0 && allKnown(g.Gpus, o.gpus) {
				g.Kind = inferencepb.ModelInstanceGroup_KIND_GPU
			}
		}
		if g.Kind == inferencepb.ModelInstanceGroup_KIND_GPU && len(g.Gpus) == 0 {
			g.Gpus = append(g.Gpus, o.gpus...)
		}
	}
}

func allKnown(ids, known []int32) bool {
	for _, id := range ids {
		found := false
		for _, k := range known {
			if k == id {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
