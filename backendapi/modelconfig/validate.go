package modelconfig

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

// wildcardDim is the dims value for a variable-size dimension.
const wildcardDim = -1

// Validate checks a normalized configuration. It returns nil or an error
// matching ErrInvalid with Triton's message for the first problem found
// (most end in "for <model>", as Triton's do), e.g.
//
//	'max_batch_size' must be non-negative value for add_sub
//	model input 'INPUT0' dimension must be integer >= 1, or -1 to indicate a variable-size dimension for add_sub
//
// Besides Triton's checks it rejects what stubvisor cannot run (a backend
// other than "python", "go" or "ensemble") and a few things Triton leaves to
// fail later: duplicate tensor names, an unusable version policy, negative
// instance counts, batch inputs/outputs without batching.
func Validate(cfg *inferencepb.ModelConfig) error {
	name := cfg.GetName()
	if name == "" {
		return invalidf("model configuration must specify 'name'")
	}
	if cfg.GetPlatform() == "" && cfg.GetBackend() == "" {
		return invalidf("must specify 'platform' or 'backend' for '%s'", name)
	}
	if cfg.GetEnsembleScheduling() != nil && cfg.GetPlatform() != KindEnsemble {
		return invalidf("ensemble scheduling cannot be set for model '%s' whose platform is not ensemble", name)
	}
	if IsEnsemble(cfg) {
		return validateEnsemble(cfg)
	}
	switch cfg.GetBackend() {
	case KindPython, KindGo:
	case "":
		return invalidf("unexpected platform type '%s' for %s", cfg.GetPlatform(), name)
	default:
		return newError(ErrInvalid, backendapi.Unsupported,
			"unable to find backend library for backend '%s', try specifying runtime on the model configuration.", cfg.GetBackend())
	}
	if cfg.GetDefaultModelFilename() == "" {
		return invalidf("must specify 'default_model_filename' for %s", name)
	}
	if err := validateBatchAndIO(cfg); err != nil {
		return err
	}
	if err := validateDynamicBatching(cfg); err != nil {
		return err
	}
	if err := validateSequenceBatching(cfg); err != nil {
		return err
	}
	if cfg.GetModelTransactionPolicy().GetDecoupled() && cfg.GetResponseCache().GetEnable() {
		return invalidf("Response Cache does not currently support model %s with 'decoupled' transaction policy. Please disable the response cache.", name)
	}
	if err := validateInstanceGroups(cfg); err != nil {
		return err
	}
	if err := validateWarmup(cfg); err != nil {
		return err
	}
	if err := validateMetrics(cfg); err != nil {
		return err
	}
	return validateParameters(cfg)
}

// validateBatchAndIO checks what an ensemble and a model it runs must both
// satisfy: the batch size, the version policy, the inputs and outputs.
func validateBatchAndIO(cfg *inferencepb.ModelConfig) error {
	if cfg.GetMaxBatchSize() < 0 {
		return invalidf("'max_batch_size' must be non-negative value for %s", cfg.GetName())
	}
	if err := validateVersionPolicy(cfg); err != nil {
		return err
	}
	return validateIO(cfg)
}

func validateVersionPolicy(cfg *inferencepb.ModelConfig) error {
	name := cfg.GetName()
	vp := cfg.GetVersionPolicy()
	if vp == nil {
		return invalidf("must specify 'version policy' for %s", name)
	}
	switch p := vp.GetPolicyChoice().(type) {
	case *inferencepb.ModelVersionPolicy_Latest_:
		if p.Latest.GetNumVersions() < 1 {
			return invalidf("version policy 'latest' must specify 'num_versions' >= 1 for %s", name)
		}
	case *inferencepb.ModelVersionPolicy_Specific_:
		if len(p.Specific.GetVersions()) == 0 {
			return invalidf("version policy 'specific' must list one or more 'versions' for %s", name)
		}
		for _, v := range p.Specific.GetVersions() {
			if v < 1 {
				return invalidf("version policy 'specific' lists invalid version %d (versions are integers >= 1) for %s", v, name)
			}
		}
	case *inferencepb.ModelVersionPolicy_All_:
	default:
		return invalidf("must specify 'version policy' for %s", name)
	}
	return nil
}

// tensorShape is what ValidateIOShape in Triton looks at in an input or
// output.
type tensorShape struct {
	name     string
	dataType inferencepb.DataType
	dims     []int64
	reshape  *inferencepb.ModelTensorReshape
}

func validateIO(cfg *inferencepb.ModelConfig) error {
	name := cfg.GetName()
	mbs := cfg.GetMaxBatchSize()
	seen := map[string]bool{}
	for _, in := range cfg.GetInput() {
		if err := validateShape("model input ", tensorShape{in.GetName(), in.GetDataType(), in.GetDims(), in.GetReshape()}, mbs); err != nil {
			return invalidf("%s for %s", err, name)
		}
		if seen[in.GetName()] {
			return invalidf("model input '%s' is specified more than once for %s", in.GetName(), name)
		}
		seen[in.GetName()] = true
		if (in.GetFormat() == inferencepb.ModelInput_FORMAT_NHWC || in.GetFormat() == inferencepb.ModelInput_FORMAT_NCHW) && len(in.GetDims()) != 3 {
			return invalidf("model input NHWC/NCHW require 3 dims for %s", name)
		}
		if in.GetIsShapeTensor() {
			return invalidf("shape tensors are only supported for TensorRT platform for %s", name)
		}
		if in.GetIsNonLinearFormatIo() {
			return invalidf("Non-linear IO format is only supported for the TensorRT platform for %s", name)
		}
	}
	clear(seen)
	for _, out := range cfg.GetOutput() {
		if err := validateShape("model output ", tensorShape{out.GetName(), out.GetDataType(), out.GetDims(), out.GetReshape()}, mbs); err != nil {
			return invalidf("%s for %s", err, name)
		}
		if seen[out.GetName()] {
			return invalidf("model output '%s' is specified more than once for %s", out.GetName(), name)
		}
		seen[out.GetName()] = true
		if out.GetIsShapeTensor() {
			return invalidf("shape tensors are only supported for TensorRT platform for %s", name)
		}
		if out.GetIsNonLinearFormatIo() {
			return invalidf("Non-linear IO format is only supported for the TensorRT platform for %s", name)
		}
	}
	if err := validateBatchIO(cfg); err != nil {
		return invalidf("%s for %s", err, name)
	}
	return nil
}

// validateShape returns the reason text (without the trailing "for
// <model>") or nil.
func validateShape(prefix string, t tensorShape, maxBatchSize int32) error {
	if t.name == "" {
		return fmt.Errorf("%smust specify 'name'", prefix)
	}
	prefix += "'" + t.name + "' "
	if t.dataType == inferencepb.DataType_TYPE_INVALID {
		return fmt.Errorf("%smust specify 'data_type'", prefix)
	}
	if _, ok := inferencepb.DataType_name[int32(t.dataType)]; !ok {
		return fmt.Errorf("%shas invalid 'data_type' %d", prefix, t.dataType)
	}
	if len(t.dims) == 0 {
		return fmt.Errorf("%smust specify 'dims'", prefix)
	}
	if t.reshape != nil && len(t.reshape.GetShape()) == 0 && maxBatchSize == 0 {
		return fmt.Errorf("%scannot have empty reshape for non-batching model as scalar tensors are not supported", prefix)
	}
	for _, d := range t.dims {
		if d < 1 && d != wildcardDim {
			return fmt.Errorf("%sdimension must be integer >= 1, or %d to indicate a variable-size dimension", prefix, wildcardDim)
		}
	}
	if t.reshape == nil {
		return nil
	}
	for _, d := range t.reshape.GetShape() {
		if d < 1 && d != wildcardDim {
			return fmt.Errorf("%sreshape dimensions must be integer >= 1, or %d to indicate a variable-size dimension", prefix, wildcardDim)
		}
	}
	// dims and reshape must hold the same number of elements; with
	// variable-size dimensions, each run of fixed dimensions between them
	// must. An empty reshape (a scalar) matches dims of one element.
	dimsRuns, reshapeRuns := elementRuns(t.dims), elementRuns(t.reshape.GetShape())
	if len(t.reshape.GetShape()) == 0 {
		if len(dimsRuns) == 1 && dimsRuns[0] == 1 {
			return nil
		}
		return fmt.Errorf("%shas different size for dims and reshape", prefix)
	}
	if len(dimsRuns) != len(reshapeRuns) {
		if len(dimsRuns) == 1 || len(reshapeRuns) == 1 {
			return fmt.Errorf("%shas different size for dims and reshape", prefix)
		}
		return fmt.Errorf("%shas different number of variable-size dimensions for dims and reshape", prefix)
	}
	if !slices.Equal(dimsRuns, reshapeRuns) {
		return fmt.Errorf("%shas different size for dims and reshape", prefix)
	}
	return nil
}

// elementRuns splits a shape at its variable-size dimensions and returns
// the element count of each run of fixed dimensions.
func elementRuns(shape []int64) []int64 {
	runs := []int64{1}
	for _, d := range shape {
		if d == wildcardDim {
			runs = append(runs, 1)
			continue
		}
		runs[len(runs)-1] *= d
	}
	return runs
}

func validateBatchIO(cfg *inferencepb.ModelConfig) error {
	inputs := map[string]bool{}
	for _, in := range cfg.GetInput() {
		inputs[in.GetName()] = true
	}
	outputs := map[string]bool{}
	for _, out := range cfg.GetOutput() {
		outputs[out.GetName()] = true
	}
	if (len(cfg.GetBatchInput()) > 0 || len(cfg.GetBatchOutput()) > 0) && cfg.GetMaxBatchSize() == 0 {
		return fmt.Errorf("batch inputs and batch outputs require 'max_batch_size' > 0")
	}
	for _, bi := range cfg.GetBatchInput() {
		if _, ok := inferencepb.BatchInput_Kind_name[int32(bi.GetKind())]; !ok {
			return fmt.Errorf("unknown batch input kind '%d'", bi.GetKind())
		}
		if len(bi.GetSourceInput()) != 1 {
			return fmt.Errorf("batch input kind '%s' expects 1 source input, got %d", bi.GetKind(), len(bi.GetSourceInput()))
		}
		if bi.GetDataType() != inferencepb.DataType_TYPE_INT32 && bi.GetDataType() != inferencepb.DataType_TYPE_FP32 {
			return fmt.Errorf("batch input data type must be TYPE_INT32 or TYPE_FP32")
		}
		for _, src := range bi.GetSourceInput() {
			if !inputs[src] {
				return fmt.Errorf("unknown source input name '%s'", src)
			}
		}
	}
	for _, bo := range cfg.GetBatchOutput() {
		if _, ok := inferencepb.BatchOutput_Kind_name[int32(bo.GetKind())]; !ok {
			return fmt.Errorf("unknown batch output kind '%d'", bo.GetKind())
		}
		if len(bo.GetSourceInput()) != 1 {
			return fmt.Errorf("batch output kind '%s' expects 1 source input, got %d", bo.GetKind(), len(bo.GetSourceInput()))
		}
		for _, src := range bo.GetSourceInput() {
			if !inputs[src] {
				return fmt.Errorf("unknown source input name '%s'", src)
			}
		}
		targets := map[string]bool{}
		for _, t := range bo.GetTargetName() {
			if !outputs[t] {
				return fmt.Errorf("unknown target output name '%s'", t)
			}
			if targets[t] {
				return fmt.Errorf("target output name '%s' can only be specified once", t)
			}
			targets[t] = true
		}
	}
	return nil
}

func validateDynamicBatching(cfg *inferencepb.ModelConfig) error {
	db := cfg.GetDynamicBatching()
	if db == nil {
		return nil
	}
	name := cfg.GetName()
	for _, size := range db.GetPreferredBatchSize() {
		if size <= 0 {
			return invalidf("dynamic batching preferred size must be positive for %s", name)
		}
		if size > cfg.GetMaxBatchSize() {
			return invalidf("dynamic batching preferred size must be <= max batch size for %s", name)
		}
	}
	levels := db.GetPriorityLevels()
	if levels != 0 {
		if db.GetDefaultPriorityLevel() == 0 || db.GetDefaultPriorityLevel() > levels {
			return invalidf("default priority level must be in range [1, %d] for %s", levels, name)
		}
		for level := range db.GetPriorityQueuePolicy() {
			if level == 0 || level > levels {
				return invalidf("priority queue policy must have priority level in range [1, %d] for %s", levels, name)
			}
		}
	}
	if db.GetPreserveOrdering() {
		if levels > 1 {
			return invalidf("Only one priority level is allowed when 'preserve_ordering' is true for %s", name)
		}
		policies := []*inferencepb.ModelQueuePolicy{db.GetDefaultQueuePolicy()}
		for _, p := range db.GetPriorityQueuePolicy() {
			policies = append(policies, p)
		}
		for _, p := range policies {
			if p.GetDefaultTimeoutMicroseconds() != 0 && p.GetTimeoutAction() == inferencepb.ModelQueuePolicy_DELAY {
				return invalidf("Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for %s", name)
			}
		}
	}
	return nil
}

func validateSequenceBatching(cfg *inferencepb.ModelConfig) error {
	sb := cfg.GetSequenceBatching()
	if sb == nil {
		return nil
	}
	name := cfg.GetName()
	if cfg.GetResponseCache().GetEnable() {
		return invalidf("Response Cache does not currently support model %s with sequence batching scheduler. Please disable the response cache.", name)
	}
	// Triton checks each control kind in its own pass; the first two checks
	// (a name, and a tensor used for one kind only) do not depend on the
	// kind, so they run once here.
	tensors := map[string]bool{}
	for _, ci := range sb.GetControlInput() {
		if ci.GetName() == "" {
			return invalidf("sequence batching control tensor must have a name for %s", name)
		}
		if tensors[ci.GetName()] {
			return invalidf("sequence batching control tensor '%s' is specified for multiple control kinds for %s", ci.GetName(), name)
		}
		tensors[ci.GetName()] = true
	}
	for _, kind := range []inferencepb.ModelSequenceBatching_Control_Kind{
		inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_START,
		inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_END,
		inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_READY,
		inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_CORRID,
	} {
		if err := validateControl(sb, kind, name); err != nil {
			return err
		}
	}
	for _, st := range sb.GetState() {
		if st.GetInputName() == "" || st.GetOutputName() == "" {
			return invalidf("state must specify both 'input_name' and 'output_name' for %s", name)
		}
		if st.GetDataType() == inferencepb.DataType_TYPE_INVALID {
			return invalidf("state '%s' must specify 'data_type' for %s", st.GetInputName(), name)
		}
		if len(st.GetDims()) == 0 {
			return invalidf("state '%s' must specify 'dims' for %s", st.GetInputName(), name)
		}
	}
	if old := sb.GetOldest(); old != nil {
		for _, size := range old.GetPreferredBatchSize() {
			if size <= 0 {
				return invalidf("sequence batching preferred batch size must be positive for %s", name)
			}
			if size > cfg.GetMaxBatchSize() {
				return invalidf("sequence batching preferred batch size must be <= max batch size for %s", name)
			}
		}
	}
	if direct := sb.GetDirect(); direct != nil {
		if u := direct.GetMinimumSlotUtilization(); u < 0 || u > 1 {
			return invalidf("sequence batching minimum slot utilization must be in range (0.0, 1.0] for %s", name)
		}
	}
	return nil
}

// validateControl checks the controls of one kind, as Triton's
// Get{Boolean,Typed}SequenceControlProperties do.
func validateControl(sb *inferencepb.ModelSequenceBatching, kind inferencepb.ModelSequenceBatching_Control_Kind, name string) error {
	seen := false
	for _, ci := range sb.GetControlInput() {
		for _, c := range ci.GetControl() {
			if c.GetKind() != kind {
				continue
			}
			if seen {
				return invalidf("sequence batching specifies multiple %s tensors for %s", kind, name)
			}
			seen = true
			nInt, nFP, nBool := len(c.GetInt32FalseTrue()), len(c.GetFp32FalseTrue()), len(c.GetBoolFalseTrue())
			if kind == inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_CORRID {
				if nInt+nFP+nBool > 0 {
					return invalidf("sequence batching must not specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for %s for %s", kind, name)
				}
				switch c.GetDataType() {
				case inferencepb.DataType_TYPE_UINT64, inferencepb.DataType_TYPE_INT64,
					inferencepb.DataType_TYPE_UINT32, inferencepb.DataType_TYPE_INT32, inferencepb.DataType_TYPE_STRING:
				default:
					return invalidf("unexpected data type for control %s for %s. Allowed data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING", kind, name)
				}
				continue
			}
			set := 0
			for _, n := range []int{nInt, nFP, nBool} {
				if n > 0 {
					set++
				}
			}
			switch {
			case set == 0:
				return invalidf("sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for %s for %s", kind, name)
			case set > 1:
				return invalidf("sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' and 'bool_false_true' for %s for %s", kind, name)
			case nInt > 0 && nInt != 2:
				return invalidf("sequence batching control 'int32_false_true' must have exactly 2 entries for %s for %s", kind, name)
			case nFP > 0 && nFP != 2:
				return invalidf("sequence batching control 'fp32_false_true' must have exactly 2 entries for %s for %s", kind, name)
			case nBool > 0 && nBool != 2:
				return invalidf("sequence batching control 'bool_false_true' must have exactly 2 entries for %s for %s", kind, name)
			}
		}
	}
	return nil
}

func validateInstanceGroups(cfg *inferencepb.ModelConfig) error {
	name := cfg.GetName()
	if len(cfg.GetInstanceGroup()) == 0 {
		return invalidf("must specify one or more 'instance group's for %s", name)
	}
	for _, g := range cfg.GetInstanceGroup() {
		prefix := "instance group " + g.GetName() + " of model " + name
		if g.GetCount() < 1 {
			return invalidf("%s must specify 'count' >= 1, got %d", prefix, g.GetCount())
		}
		switch g.GetKind() {
		case inferencepb.ModelInstanceGroup_KIND_CPU:
			if len(g.GetGpus()) > 0 {
				return invalidf("%s has kind KIND_CPU but specifies one or more GPUs", prefix)
			}
		case inferencepb.ModelInstanceGroup_KIND_MODEL:
			if len(g.GetGpus()) > 0 {
				return invalidf("%s has kind KIND_MODEL but specifies one or more GPUs", prefix)
			}
		case inferencepb.ModelInstanceGroup_KIND_GPU:
			if len(g.GetGpus()) == 0 {
				return invalidf("%s has kind KIND_GPU but no GPUs are available", prefix)
			}
			for _, id := range g.GetGpus() {
				if id < 0 {
					return invalidf("%s specifies invalid or unsupported gpu id %d", prefix, id)
				}
			}
		case inferencepb.ModelInstanceGroup_KIND_AUTO:
			return newError(ErrInvalid, backendapi.Internal, "%s has unexpected kind KIND_AUTO", prefix)
		default:
			return invalidf("%s has unknown kind %d", prefix, g.GetKind())
		}
		if len(g.GetProfile()) > 0 {
			// Triton's text, missing space included.
			return invalidf("%s and platform %sspecifies profile field which is only supported for TensorRT models", prefix, cfg.GetPlatform())
		}
	}
	return nil
}

func validateWarmup(cfg *inferencepb.ModelConfig) error {
	for _, w := range cfg.GetModelWarmup() {
		if w.GetName() == "" {
			return invalidf("model_warmup must specify 'name' for %s", cfg.GetName())
		}
		if w.GetBatchSize() == 0 {
			return invalidf("model_warmup '%s' must specify 'batch_size' >= 1 for %s", w.GetName(), cfg.GetName())
		}
		if cfg.GetMaxBatchSize() == 0 && w.GetBatchSize() > 1 {
			return invalidf("model_warmup '%s' has 'batch_size' %d but model %s does not support batching", w.GetName(), w.GetBatchSize(), cfg.GetName())
		}
		if cfg.GetMaxBatchSize() > 0 && w.GetBatchSize() > uint32(cfg.GetMaxBatchSize()) {
			return invalidf("model_warmup '%s' has 'batch_size' %d greater than 'max_batch_size' of %s", w.GetName(), w.GetBatchSize(), cfg.GetName())
		}
	}
	return nil
}

func validateMetrics(cfg *inferencepb.ModelConfig) error {
	for _, mc := range cfg.GetModelMetrics().GetMetricControl() {
		switch {
		case mc.GetMetricIdentifier() == nil:
			return invalidf("metric control must specify 'metric_identifier'")
		case mc.GetMetricIdentifier().GetFamily() == "":
			return invalidf("metric identifier must specify non-empty 'family'")
		case mc.GetHistogramOptions() == nil:
			return invalidf("metric control must specify 'histogram_options'")
		case len(mc.GetHistogramOptions().GetBuckets()) == 0:
			return invalidf("histogram options must specify non-empty 'buckets'")
		}
	}
	return nil
}

// Python backend parameters with a fixed set of values.
const (
	// paramForceCPUOnlyInputTensors ("yes" (default) or "no") says whether
	// inputs are always copied to CPU memory before execute.
	paramForceCPUOnlyInputTensors = "FORCE_CPU_ONLY_INPUT_TENSORS"
	// ParamExecutionEnvPath names a packed Python environment (a
	// conda-pack tar.gz); $$TRITON_MODEL_DIRECTORY expands to the model
	// directory.
	ParamExecutionEnvPath = "EXECUTION_ENV_PATH"
	// paramMaxRequestsPerExecute (an integer from 1 to maxRequestsPerExecute)
	// lets a model with max_batch_size 0 receive up to that many of the
	// requests queued for an instance in one execute call. It is
	// stubvisor's own: Triton hands such a model one request per execute,
	// and a model written for that may read only requests[0].
	paramMaxRequestsPerExecute = "MAX_REQUESTS_PER_EXECUTE"
	maxRequestsPerExecute      = 1024
)

// RequestsPerExecute is how many queued requests one execute call of a
// max_batch_size 0 model may receive (MAX_REQUESTS_PER_EXECUTE), 1 when
// the parameter is absent. The config was validated.
func RequestsPerExecute(cfg *inferencepb.ModelConfig) int {
	v, ok := Parameter(cfg, paramMaxRequestsPerExecute)
	if !ok {
		return 1
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 1
	}
	return n
}

// validateRequestsPerExecute checks MAX_REQUESTS_PER_EXECUTE: a whole
// number in range, on a model that has no batch dimension and no sequence
// batcher (both already decide what one execute receives).
func validateRequestsPerExecute(cfg *inferencepb.ModelConfig) error {
	v, ok := Parameter(cfg, paramMaxRequestsPerExecute)
	if !ok {
		return nil
	}
	name := cfg.GetName()
	if n, err := strconv.Atoi(v); err != nil || n < 1 || n > maxRequestsPerExecute {
		return invalidf("parameter %s of model '%s' must be a whole number from 1 to %d, got '%s'",
			paramMaxRequestsPerExecute, name, maxRequestsPerExecute, v)
	}
	switch {
	case cfg.GetMaxBatchSize() > 0:
		return invalidf("parameter %s of model '%s' applies to models with max_batch_size 0; a model with a batch dimension gets several requests per execute from dynamic_batching",
			paramMaxRequestsPerExecute, name)
	case cfg.GetSequenceBatching() != nil:
		return invalidf("parameter %s of model '%s' cannot be used with sequence_batching", paramMaxRequestsPerExecute, name)
	}
	return nil
}

func validateParameters(cfg *inferencepb.ModelConfig) error {
	if err := validateRequestsPerExecute(cfg); err != nil {
		return err
	}
	if cfg.GetBackend() != KindPython {
		return nil
	}
	if v, ok := Parameter(cfg, paramForceCPUOnlyInputTensors); ok && v != "yes" && v != "no" {
		// Triton's text, unbalanced quote included.
		return newError(ErrInvalid, backendapi.Unsupported, "Incorrect value for %s: %s'", paramForceCPUOnlyInputTensors, v)
	}
	return nil
}

// versionString is the decimal form of a version, as URLs and metadata
// carry it.
func versionString(v int64) string { return strconv.FormatInt(v, 10) }
