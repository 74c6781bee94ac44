package modelconfig_test

import (
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/backendapi/modelconfig"
)

// parseText parses a config.pbtxt snippet, failing the test on error.
func parseText(t *testing.T, text string) *inferencepb.ModelConfig {
	t.Helper()
	cfg, err := modelconfig.Parse("config.pbtxt", []byte(text))
	if err != nil {
		t.Fatalf("Parse(%q): %v", text, err)
	}
	return cfg
}

func TestNormalize(t *testing.T) {
	tests := []struct {
		name string
		text string
		dir  string
		opts []modelconfig.Option
		want string // prototext of the normalized config
	}{
		{
			name: "empty config of a python model",
			dir:  "/models/identity",
			want: `name:"identity" backend:"python" default_model_filename:"model.py"
				version_policy:{latest:{num_versions:1}}
				optimization:{input_pinned_memory:{enable:true} output_pinned_memory:{enable:true}}
				instance_group:{name:"identity" kind:KIND_CPU count:1}`,
		},
		{
			name: "go model keeps its name and gets the Go file name",
			text: `name: "gm" backend: "go" instance_group [ { kind: KIND_CPU }, { count: 2 } ]`,
			dir:  "/models/other_dir/",
			want: `name:"gm" backend:"go" default_model_filename:"model"
				version_policy:{latest:{num_versions:1}}
				optimization:{input_pinned_memory:{enable:true} output_pinned_memory:{enable:true}}
				instance_group:{name:"gm_0" kind:KIND_CPU count:1}
				instance_group:{name:"gm_1" kind:KIND_CPU count:2}`,
		},
		{
			name: "explicit values stay",
			text: `name: "m" backend: "python" default_model_filename: "main.py"
				version_policy { all {} }
				optimization { input_pinned_memory { enable: false } }
				instance_group { name: "grp" count: 4 kind: KIND_MODEL }`,
			dir: "/models/m",
			want: `name:"m" backend:"python" default_model_filename:"main.py"
				version_policy:{all:{}}
				optimization:{input_pinned_memory:{} output_pinned_memory:{enable:true}}
				instance_group:{name:"grp" kind:KIND_MODEL count:4}`,
		},
		{
			name: "batching defaults",
			text: `max_batch_size: 8 dynamic_batching { } instance_group { kind: KIND_CPU }`,
			dir:  "/models/b",
			want: `name:"b" backend:"python" default_model_filename:"model.py" max_batch_size:8
				version_policy:{latest:{num_versions:1}}
				dynamic_batching:{preferred_batch_size:8}
				optimization:{input_pinned_memory:{enable:true} output_pinned_memory:{enable:true}}
				instance_group:{name:"b_0" kind:KIND_CPU count:1}`,
		},
		{
			name: "sequence defaults",
			text: `max_batch_size: 2 sequence_batching { oldest { } }`,
			dir:  "/models/s",
			want: `name:"s" backend:"python" default_model_filename:"model.py" max_batch_size:2
				version_policy:{latest:{num_versions:1}}
				sequence_batching:{oldest:{preferred_batch_size:2} max_sequence_idle_microseconds:1000000}
				optimization:{input_pinned_memory:{enable:true} output_pinned_memory:{enable:true}}
				instance_group:{name:"s" kind:KIND_CPU count:1}`,
		},
		{
			name: "no preferred size without batching",
			text: `dynamic_batching { }`,
			dir:  "/models/nb",
			want: `name:"nb" backend:"python" default_model_filename:"model.py"
				version_policy:{latest:{num_versions:1}}
				dynamic_batching:{}
				optimization:{input_pinned_memory:{enable:true} output_pinned_memory:{enable:true}}
				instance_group:{name:"nb" kind:KIND_CPU count:1}`,
		},
		{
			name: "KIND_AUTO without GPUs is CPU",
			text: `instance_group { kind: KIND_AUTO }`,
			dir:  "/models/a",
			want: `name:"a" backend:"python" default_model_filename:"model.py"
				version_policy:{latest:{num_versions:1}}
				optimization:{input_pinned_memory:{enable:true} output_pinned_memory:{enable:true}}
				instance_group:{name:"a_0" kind:KIND_CPU count:1}`,
		},
		{
			name: "KIND_AUTO and KIND_GPU with GPUs",
			text: `instance_group [ { kind: KIND_AUTO }, { kind: KIND_AUTO gpus: [ 7 ] }, { kind: KIND_GPU }, { kind: KIND_GPU gpus: 1 } ]`,
			dir:  "/models/g",
			opts: []modelconfig.Option{modelconfig.WithGPUs(0, 1)},
			want: `name:"g" backend:"python" default_model_filename:"model.py"
				version_policy:{latest:{num_versions:1}}
				optimization:{input_pinned_memory:{enable:true} output_pinned_memory:{enable:true}}
				instance_group:{name:"g_0" kind:KIND_GPU count:1 gpus:[0,1]}
				instance_group:{name:"g_1" kind:KIND_CPU count:1 gpus:7}
				instance_group:{name:"g_2" kind:KIND_GPU count:1 gpus:[0,1]}
				instance_group:{name:"g_3" kind:KIND_GPU count:1 gpus:1}`,
		},
		{
			name: "negative count is left for Validate",
			text: `instance_group { kind: KIND_CPU count: -2 }`,
			dir:  "/models/n",
			want: `name:"n" backend:"python" default_model_filename:"model.py"
				version_policy:{latest:{num_versions:1}}
				optimization:{input_pinned_memory:{enable:true} output_pinned_memory:{enable:true}}
				instance_group:{name:"n_0" kind:KIND_CPU count:-2}`,
		},
		{
			name: "ensembles get no instance groups",
			text: `platform: "ensemble" ensemble_scheduling { step { model_name: "a" } }`,
			dir:  "/models/e",
			want: `name:"e" platform:"ensemble"
				version_policy:{latest:{num_versions:1}}
				ensemble_scheduling:{step:{model_name:"a"}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := parseText(t, tt.text)
			modelconfig.Normalize(cfg, tt.dir, tt.opts...)
			want := &inferencepb.ModelConfig{}
			if err := prototext.Unmarshal([]byte(tt.want), want); err != nil {
				t.Fatalf("bad expectation: %v", err)
			}
			if !proto.Equal(cfg, want) {
				t.Errorf("Normalize =\n%v\nwant\n%v", cfg, want)
			}
			again := proto.Clone(cfg).(*inferencepb.ModelConfig)
			modelconfig.Normalize(again, tt.dir, tt.opts...)
			if !proto.Equal(again, cfg) {
				t.Errorf("Normalize is not idempotent:\n%v\n%v", again, cfg)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	const io = `input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ] output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ] `
	tests := []struct {
		name string
		text string // normalized as the model "m" before validation
		want string // "" for valid
		code backendapi.Code
	}{
		{"valid python model", io, "", 0},
		{"valid go model", io + `backend: "go"`, "", 0},
		{"valid scalar through reshape", `max_batch_size: 4 input { name: "S" data_type: TYPE_INT64 dims: [ 1 ] reshape { shape: [ ] } }`, "", 0},
		{"valid reshape around variable dims", `input { name: "R" data_type: TYPE_FP32 dims: [ 2, 4, -1, 6 ] reshape { shape: [ 8, -1, 1, 6 ] } }`, "", 0},
		{"valid sequence controls", `max_batch_size: 2 sequence_batching { control_input [
			{ name: "S" control { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } },
			{ name: "C" control { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } } ] }`, "", 0},

		{"unknown backend", io + `backend: "onnxruntime"`,
			"unable to find backend library for backend 'onnxruntime', try specifying runtime on the model configuration.", backendapi.Unsupported},
		{"platform without backend", io + `platform: "tensorflow_savedmodel"`, "unexpected platform type 'tensorflow_savedmodel' for m", backendapi.InvalidArg},
		{"valid ensemble chain", io + `platform: "ensemble" ensemble_scheduling { step [
			{ model_name: "a" model_version: -1 input_map { key: "X" value: "IN" } output_map { key: "Y" value: "mid" } },
			{ model_name: "b" model_version: -1 input_map { key: "X" value: "mid" } output_map { key: "Y" value: "OUT" } } ] }`, "", 0},
		{"valid ensemble as backend", io + `backend: "ensemble" ensemble_scheduling { step [
			{ model_name: "a" input_map { key: "X" value: "IN" } output_map { key: "Y" value: "OUT" } } ] }`, "", 0},
		{"ensemble without scheduling", io + `platform: "ensemble"`,
			"ensemble scheduling must be set for ensemble m whose platform is ensemble", backendapi.InvalidArg},
		{"ensemble without steps", io + `platform: "ensemble" ensemble_scheduling { }`, "must specify 'step' for ensemble 'm'", backendapi.InvalidArg},
		{"ensemble step without model", io + `platform: "ensemble" ensemble_scheduling { step { input_map { key: "X" value: "IN" } } }`,
			"must specify 'model_name' in step of ensemble 'm'", backendapi.InvalidArg},
		{"ensemble step without input_map", io + `platform: "ensemble" ensemble_scheduling { step { model_name: "a" } }`,
			"must specify 'input_map' in step of ensemble 'm'", backendapi.InvalidArg},
		{"ensemble step without output_map", io + `platform: "ensemble" ensemble_scheduling { step { model_name: "a" input_map { key: "X" value: "IN" } } }`,
			"must specify 'output_map' in step of ensemble 'm'", backendapi.InvalidArg},
		{"ensemble with instance groups", io + `platform: "ensemble" instance_group { count: 1 } ensemble_scheduling { step { model_name: "a" } }`,
			"instance group should not be specified for ensemble 'm'", backendapi.InvalidArg},
		{"ensemble tensor written twice", io + `platform: "ensemble" ensemble_scheduling { step [
			{ model_name: "a" input_map { key: "X" value: "IN" } output_map { key: "Y" value: "OUT" } },
			{ model_name: "b" input_map { key: "X" value: "IN" } output_map { key: "Y" value: "OUT" } } ] }`,
			"ensemble tensor 'OUT' can appear in an output map only once for ensemble 'm' step", backendapi.InvalidArg},
		{"ensemble tensor consumed but never produced", io + `platform: "ensemble" ensemble_scheduling { step [
			{ model_name: "a" input_map [ { key: "X" value: "IN" }, { key: "Z" value: "nowhere" } ] output_map { key: "Y" value: "OUT" } } ] }`,
			"output 'OUT' for ensemble 'm' is not written", backendapi.InvalidArg},
		{"ensemble cycle", io + `platform: "ensemble" ensemble_scheduling { step [
			{ model_name: "a" input_map [ { key: "X" value: "IN" }, { key: "Z" value: "loop" } ] output_map { key: "Y" value: "mid" } },
			{ model_name: "b" input_map { key: "X" value: "mid" } output_map [ { key: "Y" value: "OUT" }, { key: "W" value: "loop" } ] } ] }`,
			"output 'OUT' for ensemble 'm' is not written", backendapi.InvalidArg},
		{"ensemble input unused", io + `input { name: "EXTRA" data_type: TYPE_FP32 dims: 1 } platform: "ensemble" ensemble_scheduling { step [
			{ model_name: "a" input_map { key: "X" value: "IN" } output_map { key: "Y" value: "OUT" } } ] }`,
			"ensemble input 'EXTRA' for ensemble m' is not used", backendapi.InvalidArg},
		{"ensemble tensor unused", io + `platform: "ensemble" ensemble_scheduling { step [
			{ model_name: "a" input_map { key: "X" value: "IN" } output_map [ { key: "Y" value: "OUT" }, { key: "Z" value: "dangling" } ] } ] }`,
			"ensemble tensor 'dangling' is unused in ensemble 'm'", backendapi.InvalidArg},
		{"ensemble scheduling on a python model", `ensemble_scheduling { step { model_name: "a" } }`,
			"ensemble scheduling cannot be set for model 'm' whose platform is not ensemble", backendapi.InvalidArg},
		{"negative max_batch_size", io + `max_batch_size: -1`, "'max_batch_size' must be non-negative value for m", backendapi.InvalidArg},
		{"latest zero versions", io + `version_policy { latest { num_versions: 0 } }`,
			"version policy 'latest' must specify 'num_versions' >= 1 for m", backendapi.InvalidArg},
		{"specific without versions", io + `version_policy { specific { } }`,
			"version policy 'specific' must list one or more 'versions' for m", backendapi.InvalidArg},
		{"specific version zero", io + `version_policy { specific { versions: [ 1, 0 ] } }`,
			"version policy 'specific' lists invalid version 0 (versions are integers >= 1) for m", backendapi.InvalidArg},
		{"input without name", `input { data_type: TYPE_FP32 dims: 1 }`, "model input must specify 'name' for m", backendapi.InvalidArg},
		{"input without data_type", `input { name: "IN" dims: 1 }`, "model input 'IN' must specify 'data_type' for m", backendapi.InvalidArg},
		{"invalid data_type number", `input { name: "IN" data_type: 42 dims: 1 }`, "model input 'IN' has invalid 'data_type' 42 for m", backendapi.InvalidArg},
		{"output without dims", `output { name: "OUT" data_type: TYPE_INT8 }`, "model output 'OUT' must specify 'dims' for m", backendapi.InvalidArg},
		{"zero dim", `input { name: "IN" data_type: TYPE_FP32 dims: [ 2, 0 ] }`,
			"model input 'IN' dimension must be integer >= 1, or -1 to indicate a variable-size dimension for m", backendapi.InvalidArg},
		{"bad reshape dim", `output { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ -2 ] } }`,
			"model output 'OUT' reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension for m", backendapi.InvalidArg},
		{"reshape size mismatch", `input { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 2, 3 ] } }`,
			"model input 'IN' has different size for dims and reshape for m", backendapi.InvalidArg},
		{"reshape variable dims mismatch", `input { name: "IN" data_type: TYPE_FP32 dims: [ -1, 4 ] reshape { shape: [ -1, 2, -1 ] } }`,
			"model input 'IN' has different number of variable-size dimensions for dims and reshape for m", backendapi.InvalidArg},
		{"empty reshape without batching", `input { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] reshape { } }`,
			"model input 'IN' cannot have empty reshape for non-batching model as scalar tensors are not supported for m", backendapi.InvalidArg},
		{"duplicate input", `input [ { name: "A" data_type: TYPE_FP32 dims: 1 }, { name: "A" data_type: TYPE_FP32 dims: 1 } ]`,
			"model input 'A' is specified more than once for m", backendapi.InvalidArg},
		{"duplicate output", `output [ { name: "B" data_type: TYPE_FP32 dims: 1 }, { name: "B" data_type: TYPE_INT32 dims: 1 } ]`,
			"model output 'B' is specified more than once for m", backendapi.InvalidArg},
		{"NCHW needs 3 dims", `input { name: "IMG" data_type: TYPE_UINT8 format: FORMAT_NCHW dims: [ 3, 224 ] }`,
			"model input NHWC/NCHW require 3 dims for m", backendapi.InvalidArg},
		{"shape tensor", `input { name: "IN" data_type: TYPE_INT32 dims: 1 is_shape_tensor: true }`,
			"shape tensors are only supported for TensorRT platform for m", backendapi.InvalidArg},
		{"batch input without batching", io + `batch_input { kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_INT32 source_input: "IN" }`,
			"batch inputs and batch outputs require 'max_batch_size' > 0 for m", backendapi.InvalidArg},
		{"batch input unknown source", io + `max_batch_size: 2 batch_input { kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_INT32 source_input: "X" }`,
			"unknown source input name 'X' for m", backendapi.InvalidArg},
		{"batch input data type", io + `max_batch_size: 2 batch_input { kind: BATCH_ITEM_SHAPE target_name: "N" data_type: TYPE_INT64 source_input: "IN" }`,
			"batch input data type must be TYPE_INT32 or TYPE_FP32 for m", backendapi.InvalidArg},
		{"batch output target twice", io + `max_batch_size: 2 batch_output { target_name: [ "OUT", "OUT" ] source_input: "IN" }`,
			"target output name 'OUT' can only be specified once for m", backendapi.InvalidArg},
		{"preferred size above max", io + `max_batch_size: 4 dynamic_batching { preferred_batch_size: [ 2, 8 ] }`,
			"dynamic batching preferred size must be <= max batch size for m", backendapi.InvalidArg},
		{"preferred size without batching", io + `dynamic_batching { preferred_batch_size: 2 }`,
			"dynamic batching preferred size must be <= max batch size for m", backendapi.InvalidArg},
		{"preferred size zero", io + `max_batch_size: 4 dynamic_batching { preferred_batch_size: 0 }`,
			"dynamic batching preferred size must be positive for m", backendapi.InvalidArg},
		{"default priority out of range", io + `max_batch_size: 4 dynamic_batching { priority_levels: 3 default_priority_level: 4 }`,
			"default priority level must be in range [1, 3] for m", backendapi.InvalidArg},
		{"priority policy out of range", io + `max_batch_size: 4 dynamic_batching { priority_levels: 3 default_priority_level: 1 priority_queue_policy { key: 9 value { } } }`,
			"priority queue policy must have priority level in range [1, 3] for m", backendapi.InvalidArg},
		{"preserve ordering with priorities", io + `max_batch_size: 4 dynamic_batching { preserve_ordering: true priority_levels: 2 default_priority_level: 1 }`,
			"Only one priority level is allowed when 'preserve_ordering' is true for m", backendapi.InvalidArg},
		{"preserve ordering with DELAY", io + `max_batch_size: 4 dynamic_batching { preserve_ordering: true default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 10 } }`,
			"Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for m", backendapi.InvalidArg},
		{"control without name", io + `sequence_batching { control_input { control { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } } }`,
			"sequence batching control tensor must have a name for m", backendapi.InvalidArg},
		{"control tensor reused", io + `sequence_batching { control_input [ { name: "S" control { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } },
			{ name: "S" control { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } } ] }`,
			"sequence batching control tensor 'S' is specified for multiple control kinds for m", backendapi.InvalidArg},
		{"two START controls", io + `sequence_batching { control_input [ { name: "S" control { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } },
			{ name: "T" control { kind: CONTROL_SEQUENCE_START bool_false_true: [ false, true ] } } ] }`,
			"sequence batching specifies multiple CONTROL_SEQUENCE_START tensors for m", backendapi.InvalidArg},
		{"control without values", io + `sequence_batching { control_input { name: "R" control { kind: CONTROL_SEQUENCE_READY } } }`,
			"sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for CONTROL_SEQUENCE_READY for m", backendapi.InvalidArg},
		{"control with two value kinds", io + `sequence_batching { control_input { name: "E" control { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] fp32_false_true: [ 0, 1 ] } } }`,
			"sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' and 'bool_false_true' for CONTROL_SEQUENCE_END for m", backendapi.InvalidArg},
		{"control with three values", io + `sequence_batching { control_input { name: "E" control { kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1, 2 ] } } }`,
			"sequence batching control 'fp32_false_true' must have exactly 2 entries for CONTROL_SEQUENCE_END for m", backendapi.InvalidArg},
		{"CORRID with values", io + `sequence_batching { control_input { name: "C" control { kind: CONTROL_SEQUENCE_CORRID int32_false_true: [ 0, 1 ] data_type: TYPE_INT32 } } }`,
			"sequence batching must not specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for CONTROL_SEQUENCE_CORRID for m", backendapi.InvalidArg},
		{"CORRID type", io + `sequence_batching { control_input { name: "C" control { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 } } }`,
			"unexpected data type for control CONTROL_SEQUENCE_CORRID for m. Allowed data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING", backendapi.InvalidArg},
		{"state without output", io + `sequence_batching { state { input_name: "S" data_type: TYPE_INT32 dims: 1 } }`,
			"state must specify both 'input_name' and 'output_name' for m", backendapi.InvalidArg},
		{"slot utilization", io + `sequence_batching { direct { minimum_slot_utilization: 1.5 } }`,
			"sequence batching minimum slot utilization must be in range (0.0, 1.0] for m", backendapi.InvalidArg},
		{"oldest preferred above max", io + `max_batch_size: 2 sequence_batching { oldest { preferred_batch_size: 4 } }`,
			"sequence batching preferred batch size must be <= max batch size for m", backendapi.InvalidArg},
		{"response cache with sequences", io + `sequence_batching { } response_cache { enable: true }`,
			"Response Cache does not currently support model m with sequence batching scheduler. Please disable the response cache.", backendapi.InvalidArg},
		{"response cache when decoupled", io + `model_transaction_policy { decoupled: true } response_cache { enable: true }`,
			"Response Cache does not currently support model m with 'decoupled' transaction policy. Please disable the response cache.", backendapi.InvalidArg},
		{"negative instance count", io + `instance_group { count: -1 kind: KIND_CPU }`,
			"instance group m_0 of model m must specify 'count' >= 1, got -1", backendapi.InvalidArg},
		{"CPU group with GPUs", io + `instance_group { kind: KIND_CPU gpus: 0 }`,
			"instance group m_0 of model m has kind KIND_CPU but specifies one or more GPUs", backendapi.InvalidArg},
		{"GPU group without GPUs", io + `instance_group { name: "gpu" kind: KIND_GPU }`,
			"instance group gpu of model m has kind KIND_GPU but no GPUs are available", backendapi.InvalidArg},
		{"profiles", io + `instance_group { kind: KIND_CPU profile: "0" }`,
			"instance group m_0 of model m and platform specifies profile field which is only supported for TensorRT models", backendapi.InvalidArg},
		{"warmup batch without batching", io + `model_warmup { name: "w" batch_size: 2 }`,
			"model_warmup 'w' has 'batch_size' 2 but model m does not support batching", backendapi.InvalidArg},
		{"metrics without buckets", io + `model_metrics { metric_control { metric_identifier { family: "nv_inference_first_response_histogram_ms" } histogram_options { } } }`,
			"histogram options must specify non-empty 'buckets'", backendapi.InvalidArg},
		{"FORCE_CPU_ONLY_INPUT_TENSORS", io + `parameters { key: "FORCE_CPU_ONLY_INPUT_TENSORS" value { string_value: "maybe" } }`,
			"Incorrect value for FORCE_CPU_ONLY_INPUT_TENSORS: maybe'", backendapi.Unsupported},
		{"valid MAX_REQUESTS_PER_EXECUTE", io + `parameters { key: "MAX_REQUESTS_PER_EXECUTE" value { string_value: "8" } }`, "", 0},
		{"MAX_REQUESTS_PER_EXECUTE not a number", io + `parameters { key: "MAX_REQUESTS_PER_EXECUTE" value { string_value: "many" } }`,
			"parameter MAX_REQUESTS_PER_EXECUTE of model 'm' must be a whole number from 1 to 1024, got 'many'", backendapi.InvalidArg},
		{"MAX_REQUESTS_PER_EXECUTE zero", io + `parameters { key: "MAX_REQUESTS_PER_EXECUTE" value { string_value: "0" } }`,
			"parameter MAX_REQUESTS_PER_EXECUTE of model 'm' must be a whole number from 1 to 1024, got '0'", backendapi.InvalidArg},
		{"MAX_REQUESTS_PER_EXECUTE with a batch dimension", `max_batch_size: 4 ` + io + `parameters { key: "MAX_REQUESTS_PER_EXECUTE" value { string_value: "8" } }`,
			"parameter MAX_REQUESTS_PER_EXECUTE of model 'm' applies to models with max_batch_size 0; a model with a batch dimension gets several requests per execute from dynamic_batching", backendapi.InvalidArg},
		{"MAX_REQUESTS_PER_EXECUTE with sequence batching", io + `sequence_batching { } parameters { key: "MAX_REQUESTS_PER_EXECUTE" value { string_value: "8" } }`,
			"parameter MAX_REQUESTS_PER_EXECUTE of model 'm' cannot be used with sequence_batching", backendapi.InvalidArg},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := parseText(t, tt.text)
			modelconfig.Normalize(cfg, "/models/m")
			err := modelconfig.Validate(cfg)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			assertErrorText(t, err, tt.want, modelconfig.ErrInvalid, tt.code)
		})
	}
}

// TestValidateUnnormalized covers what Normalize would have filled in.
func TestValidateUnnormalized(t *testing.T) {
	tests := []struct {
		name string
		text string
		want string
	}{
		{"no name", `backend: "python"`, "model configuration must specify 'name'"},
		{"no backend", `name: "m"`, "must specify 'platform' or 'backend' for 'm'"},
		{"no model file", `name: "m" backend: "python"`, "must specify 'default_model_filename' for m"},
		{"no version policy", `name: "m" backend: "python" default_model_filename: "model.py"`, "must specify 'version policy' for m"},
		{"no instance group", `name: "m" backend: "python" default_model_filename: "model.py" version_policy { all { } }`,
			"must specify one or more 'instance group's for m"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := modelconfig.Validate(parseText(t, tt.text))
			assertErrorText(t, err, tt.want, modelconfig.ErrInvalid, backendapi.InvalidArg)
		})
	}
}

func TestKindAndParameter(t *testing.T) {
	tests := []struct {
		text string
		kind string
	}{
		{``, modelconfig.KindPython},
		{`backend: "python"`, modelconfig.KindPython},
		{`backend: "go"`, modelconfig.KindGo},
		{`platform: "ensemble"`, "ensemble"},
		{`platform: "onnxruntime_onnx" backend: "onnxruntime"`, "onnxruntime"},
	}
	for _, tt := range tests {
		if got := modelconfig.Kind(parseText(t, tt.text)); got != tt.kind {
			t.Errorf("Kind(%q) = %q, want %q", tt.text, got, tt.kind)
		}
	}
	cfg := parseText(t, `parameters { key: "a" value { string_value: "x" } } parameters { key: "empty" value { } }`)
	for _, tt := range []struct {
		key   string
		value string
		ok    bool
	}{{"a", "x", true}, {"empty", "", true}, {"missing", "", false}} {
		if v, ok := modelconfig.Parameter(cfg, tt.key); v != tt.value || ok != tt.ok {
			t.Errorf("Parameter(%q) = %q, %v; want %q, %v", tt.key, v, ok, tt.value, tt.ok)
		}
	}
}

func TestMetadata(t *testing.T) {
	tests := []struct {
		name     string
		cfg      *inferencepb.ModelConfig
		versions []int64
		want     backendapi.ModelMetadata
	}{
		{
			name:     "add_sub",
			cfg:      normalized(t, "add_sub.pbtxt", "add_sub"),
			versions: []int64{3, 1, 3},
			want: backendapi.ModelMetadata{
				Name: "add_sub", Versions: []string{"1", "3"}, Platform: "python",
				Inputs: []backendapi.TensorMetadata{
					{Name: "INPUT0", DataType: backendapi.TypeFP32, Shape: []int64{4}},
					{Name: "INPUT1", DataType: backendapi.TypeFP32, Shape: []int64{4}},
				},
				Outputs: []backendapi.TensorMetadata{
					{Name: "OUTPUT0", DataType: backendapi.TypeFP32, Shape: []int64{4}},
					{Name: "OUTPUT1", DataType: backendapi.TypeFP32, Shape: []int64{4}},
				},
			},
		},
		{
			name:     "batching adds the batch dimension",
			cfg:      normalized(t, "dynamic_batching.pbtxt", "text_classifier"),
			versions: []int64{2},
			want: backendapi.ModelMetadata{
				Name: "text_classifier", Versions: []string{"2"}, Platform: "python",
				Inputs: []backendapi.TensorMetadata{
					{Name: "TEXT", DataType: backendapi.TypeBytes, Shape: []int64{-1, 1}},
					{Name: "MASK", DataType: backendapi.TypeBool, Shape: []int64{-1, -1}},
				},
				Outputs: []backendapi.TensorMetadata{
					{Name: "LOGITS", DataType: backendapi.TypeFP16, Shape: []int64{-1, 3}},
				},
			},
		},
		{
			name: "platform wins over backend, no versions ready",
			cfg:  parseText(t, `name: "p" platform: "custom_platform" backend: "go"`),
			want: backendapi.ModelMetadata{
				Name: "p", Versions: []string{}, Platform: "custom_platform",
				Inputs: []backendapi.TensorMetadata{}, Outputs: []backendapi.TensorMetadata{},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := modelconfig.Metadata(tt.cfg, tt.versions)
			if !metadataEqual(got, tt.want) {
				t.Errorf("Metadata =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func metadataEqual(a, b backendapi.ModelMetadata) bool {
	if a.Name != b.Name || a.Platform != b.Platform || len(a.Versions) != len(b.Versions) ||
		len(a.Inputs) != len(b.Inputs) || len(a.Outputs) != len(b.Outputs) || (a.Versions == nil) != (b.Versions == nil) {
		return false
	}
	for i := range a.Versions {
		if a.Versions[i] != b.Versions[i] {
			return false
		}
	}
	tensorsEqual := func(x, y []backendapi.TensorMetadata) bool {
		for i := range x {
			if x[i].Name != y[i].Name || x[i].DataType != y[i].DataType || !equalTo(x[i].Shape, y[i].Shape...) {
				return false
			}
		}
		return true
	}
	return tensorsEqual(a.Inputs, b.Inputs) && tensorsEqual(a.Outputs, b.Outputs)
}

// TestDataTypes checks that config and wire types agree for every value.
func TestDataTypes(t *testing.T) {
	for num, name := range inferencepb.DataType_name {
		dt := inferencepb.DataType(num)
		wire := modelconfig.DataType(dt)
		if dt == inferencepb.DataType_TYPE_INVALID {
			if wire != backendapi.TypeInvalid {
				t.Errorf("DataType(TYPE_INVALID) = %v", wire)
			}
			continue
		}
		if wire.ConfigName() != name {
			t.Errorf("DataType(%s).ConfigName() = %s", name, wire.ConfigName())
		}
		if backendapi.ParseDataType(name) != wire {
			t.Errorf("ParseDataType(%s) = %v, want %v", name, backendapi.ParseDataType(name), wire)
		}
	}
	for _, bad := range []inferencepb.DataType{-1, 15, 255, 256} {
		if got := modelconfig.DataType(bad); got != backendapi.TypeInvalid {
			t.Errorf("DataType(%d) = %v, want INVALID", bad, got)
		}
	}
}
