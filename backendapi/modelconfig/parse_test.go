package modelconfig_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/backendapi/modelconfig"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// readConfig parses testdata/<file>.
func readConfig(t *testing.T, file string) *inferencepb.ModelConfig {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := modelconfig.Parse(file, data)
	if err != nil {
		t.Fatalf("Parse(%s): %v", file, err)
	}
	return cfg
}

// normalized parses testdata/<file> and normalizes it as if it were the
// config of <dir>/<model>.
func normalized(t *testing.T, file, model string) *inferencepb.ModelConfig {
	t.Helper()
	cfg := readConfig(t, file)
	modelconfig.Normalize(cfg, filepath.Join("/models", model))
	if err := modelconfig.Validate(cfg); err != nil {
		t.Fatalf("Validate(%s): %v", file, err)
	}
	return cfg
}

func TestParseTestdata(t *testing.T) {
	tests := []struct {
		file  string
		check func(t *testing.T, cfg *inferencepb.ModelConfig)
	}{
		{"add_sub.pbtxt", func(t *testing.T, cfg *inferencepb.ModelConfig) {
			// The four one-element input/output blocks merge into two lists.
			if got := names(cfg); got != "INPUT0,INPUT1->OUTPUT0,OUTPUT1" {
				t.Errorf("tensors = %s", got)
			}
			if cfg.GetName() != "add_sub" || cfg.GetBackend() != "python" || cfg.GetMaxBatchSize() != 0 {
				t.Errorf("name/backend/max_batch_size = %q/%q/%d", cfg.GetName(), cfg.GetBackend(), cfg.GetMaxBatchSize())
			}
			if in := cfg.GetInput()[1]; in.GetDataType() != inferencepb.DataType_TYPE_FP32 || !equalTo(in.GetDims(), 4) {
				t.Errorf("INPUT1 = %v", in)
			}
			if g := cfg.GetInstanceGroup(); len(g) != 1 || g[0].GetKind() != inferencepb.ModelInstanceGroup_KIND_CPU || g[0].GetCount() != 0 {
				t.Errorf("instance_group = %v", g)
			}
		}},
		{"decoupled_repeat.pbtxt", func(t *testing.T, cfg *inferencepb.ModelConfig) {
			if cfg.GetName() != "" {
				t.Errorf("name = %q, want none", cfg.GetName())
			}
			if !cfg.GetModelTransactionPolicy().GetDecoupled() {
				t.Error("decoupled: True was not read")
			}
			if got := names(cfg); got != "IN,DELAY,WAIT->OUT,IDX" {
				t.Errorf("tensors = %s", got)
			}
			if !equalTo(cfg.GetInput()[0].GetDims(), -1) {
				t.Errorf("IN dims = %v", cfg.GetInput()[0].GetDims())
			}
		}},
		{"dynamic_batching.pbtxt", func(t *testing.T, cfg *inferencepb.ModelConfig) {
			db := cfg.GetDynamicBatching()
			if db == nil {
				t.Fatal("no dynamic_batching")
			}
			if !equalTo(db.GetPreferredBatchSize(), 4, 8) || db.GetMaxQueueDelayMicroseconds() != 100 ||
				db.GetPriorityLevels() != 2 || db.GetDefaultPriorityLevel() != 2 {
				t.Errorf("dynamic_batching = %v", db)
			}
			if p := db.GetDefaultQueuePolicy(); p.GetDefaultTimeoutMicroseconds() != 5000000 || !p.GetAllowTimeoutOverride() || p.GetMaxQueueSize() != 16 {
				t.Errorf("default_queue_policy = %v", p)
			}
			if p := db.GetPriorityQueuePolicy()[1]; p.GetTimeoutAction() != inferencepb.ModelQueuePolicy_DELAY || p.GetMaxQueueSize() != 4 {
				t.Errorf("priority_queue_policy[1] = %v", p)
			}
			text := cfg.GetInput()[0]
			if text.GetDataType() != inferencepb.DataType_TYPE_STRING || text.GetReshape() == nil || len(text.GetReshape().GetShape()) != 0 {
				t.Errorf("TEXT = %v, want TYPE_STRING with an empty reshape", text)
			}
			if mask := cfg.GetInput()[1]; !mask.GetOptional() || !mask.GetAllowRaggedBatch() {
				t.Errorf("MASK = %v", mask)
			}
			if v, ok := modelconfig.Parameter(cfg, "FORCE_CPU_ONLY_INPUT_TENSORS"); !ok || v != "no" {
				t.Errorf("FORCE_CPU_ONLY_INPUT_TENSORS = %q, %v", v, ok)
			}
			if v, _ := modelconfig.Parameter(cfg, "EXECUTION_ENV_PATH"); v != "$$TRITON_MODEL_DIRECTORY/env.tar.gz" {
				t.Errorf("EXECUTION_ENV_PATH = %q", v)
			}
			if !cfg.GetResponseCache().GetEnable() || cfg.GetVersionPolicy().GetLatest().GetNumVersions() != 2 {
				t.Errorf("response_cache/version_policy = %v/%v", cfg.GetResponseCache(), cfg.GetVersionPolicy())
			}
		}},
		{"sequence.pbtxt", func(t *testing.T, cfg *inferencepb.ModelConfig) {
			sb := cfg.GetSequenceBatching()
			if sb.GetMaxSequenceIdleMicroseconds() != 5000000 || sb.GetOldest().GetMaxCandidateSequences() != 8 {
				t.Errorf("sequence_batching = %v", sb)
			}
			ci := sb.GetControlInput()
			if len(ci) != 4 {
				t.Fatalf("control_input = %v", ci)
			}
			if c := ci[0].GetControl()[0]; c.GetKind() != inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_START || !equalTo(c.GetInt32FalseTrue(), 0, 1) {
				t.Errorf("START = %v", c)
			}
			// Integer literals are accepted for float fields.
			if c := ci[1].GetControl()[0]; c.GetKind() != inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_END ||
				len(c.GetFp32FalseTrue()) != 2 || c.GetFp32FalseTrue()[0] != 0 || c.GetFp32FalseTrue()[1] != 1 {
				t.Errorf("END = %v", c)
			}
			if c := ci[2].GetControl()[0]; c.GetKind() != inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_READY ||
				len(c.GetBoolFalseTrue()) != 2 || c.GetBoolFalseTrue()[0] || !c.GetBoolFalseTrue()[1] {
				t.Errorf("READY = %v", c)
			}
			if c := ci[3].GetControl()[0]; c.GetKind() != inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_CORRID || c.GetDataType() != inferencepb.DataType_TYPE_UINT64 {
				t.Errorf("CORRID = %v", c)
			}
			st := sb.GetState()
			if len(st) != 1 || st[0].GetInputName() != "STATE_IN" || st[0].GetInitialState()[0].GetZeroData() != true {
				t.Errorf("state = %v", st)
			}
		}},
		{"go_identity.pbtxt", func(t *testing.T, cfg *inferencepb.ModelConfig) {
			if cfg.GetBackend() != "go" || !equalTo(cfg.GetVersionPolicy().GetSpecific().GetVersions(), 1, 3) {
				t.Errorf("backend/version_policy = %q/%v", cfg.GetBackend(), cfg.GetVersionPolicy())
			}
			w := cfg.GetModelWarmup()
			if len(w) != 1 || w[0].GetBatchSize() != 2 || !w[0].GetInputs()["INPUT0"].GetZeroData() {
				t.Errorf("model_warmup = %v", w)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			tt.check(t, readConfig(t, tt.file))
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		file string
		want string
	}{
		{"broken_unknown_field.pbtxt", `broken_unknown_field.pbtxt:7: unknown field "dimz" in inference.ModelInput`},
		{"broken_enum.pbtxt", `broken_enum.pbtxt:5: invalid value TYPE_FLOAT for field "data_type" (enum inference.DataType) in inference.ModelInput`},
		{"broken_oneof.pbtxt", `broken_oneof.pbtxt:4: field "sequence_batching" conflicts with another field of oneof scheduling_choice already set in inference.ModelConfig`},
		{"broken_repeated.pbtxt", `broken_repeated.pbtxt:3: field "max_batch_size" is specified more than once in inference.ModelConfig`},
		{"broken_syntax.pbtxt", `broken_syntax.pbtxt:8: syntax error: unexpected character 'o'`},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			_, err = modelconfig.Parse(tt.file, data)
			assertErrorText(t, err, tt.want, modelconfig.ErrParse, backendapi.InvalidArg)
		})
	}
}

// TestParseTextForms covers the spellings found in real config.pbtxt files.
func TestParseTextForms(t *testing.T) {
	tests := []struct {
		name string
		text string
		want string // the config in prototext's compact form
	}{
		{"empty file", ``, ``},
		{"comments only", "# nothing\n  # here\n", ``},
		{"byte order mark", "\xEF\xBB\xBFname: \"m\"", `name:"m"`},
		{"separators and single quotes", `name: 'm'; max_batch_size: 2, backend: "python"`, `name:"m" backend:"python" max_batch_size:2`},
		{"blocks merge", `input [ { name: "a" } ] input { name: "b" } input [ { name: "c" }, { name: "d" } ]`,
			`input:{name:"a"} input:{name:"b"} input:{name:"c"} input:{name:"d"}`},
		{"scalar lists and repeats", `input { name: "a" dims: [ 1, 2 ] dims: 3 dims: [] }`, `input:{name:"a" dims:1 dims:2 dims:3}`},
		{"colon before message and angle brackets", `model_transaction_policy: < decoupled: true >`, `model_transaction_policy:{decoupled:true}`},
		{"bool spellings", `input { optional: True allow_ragged_batch: t is_shape_tensor: 0 }`, `input:{allow_ragged_batch:true optional:true}`},
		{"enum by number", `input { data_type: 11 }`, `input:{data_type:TYPE_FP32}`},
		{"map entries", `parameters { key: "a" value { string_value: "1" } } parameters: { key: "b", value: { string_value: "2" } }`,
			`parameters:{key:"a" value:{string_value:"1"}} parameters:{key:"b" value:{string_value:"2"}}`},
		{"adjacent strings concatenate", `name: "ab" "cd"`, `name:"abcd"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := modelconfig.Parse("config.pbtxt", []byte(tt.text))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			want := &inferencepb.ModelConfig{}
			if err := unmarshalText(tt.want, want); err != nil {
				t.Fatalf("bad test expectation %q: %v", tt.want, err)
			}
			if !proto.Equal(cfg, want) {
				t.Errorf("Parse = %v\nwant    %v", cfg, want)
			}
		})
	}
}

// TestParseErrorContext checks that errors name the message being read
// wherever the mistake sits: nested, in lists, in maps, after comments
// and strings holding braces.
func TestParseErrorContext(t *testing.T) {
	tests := []struct {
		name string
		text string
		want string
	}{
		{"top level", "name: \"m\"\nbogus: 1\n", `config.pbtxt:2: unknown field "bogus" in inference.ModelConfig`},
		{"nested message", "dynamic_batching {\n  default_queue_policy { timeout: 3 }\n}", `config.pbtxt:2: unknown field "timeout" in inference.ModelQueuePolicy`},
		{"after a closed sibling", "input { name: \"a\" }\noutput [ { name: \"}{\" } ]\nzzz: 1", `config.pbtxt:3: unknown field "zzz" in inference.ModelConfig`},
		{"second list element", "input [\n  { name: \"a\" },\n  { name: \"b\" nmae: \"c\" }\n]", `config.pbtxt:3: unknown field "nmae" in inference.ModelInput`},
		{"map value", "parameters { key: \"k\" value { string: \"v\" } }", `config.pbtxt:1: unknown field "string" in inference.ModelParameter`},
		{"comment with braces", "# input { name: \"x\" \ninstance_group [ { kind: KIND_CPU cnt: 1 } ]", `config.pbtxt:2: unknown field "cnt" in inference.ModelInstanceGroup`},
		{"deep oneof member", "sequence_batching { control_input [ { name: \"S\" control [ { kind: CONTROL_SEQUENCE_BEGIN } ] } ] }",
			`config.pbtxt:1: invalid value CONTROL_SEQUENCE_BEGIN for field "kind" (enum inference.ModelSequenceBatching.Control.Kind) in inference.ModelSequenceBatching.Control`},
		{"wrong scalar type", "max_batch_size: \"eight\"", `config.pbtxt:1: invalid value "eight" for field "max_batch_size" (int32) in inference.ModelConfig`},
		{"list of scalars", "input { dims: [ 1, x ] }", `config.pbtxt:1: invalid value x for field "dims" (int64) in inference.ModelInput`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := modelconfig.Parse("config.pbtxt", []byte(tt.text))
			if err == nil || err.Error() != tt.want {
				t.Errorf("error = %v\nwant    %s", err, tt.want)
			}
		})
	}
}

func TestToJSONGolden(t *testing.T) {
	tests := []struct{ file, model, golden string }{
		{"add_sub.pbtxt", "add_sub", "add_sub.json"},
		{"decoupled_repeat.pbtxt", "repeat_int32", "decoupled_repeat.json"},
		{"dynamic_batching.pbtxt", "text_classifier", "dynamic_batching.json"},
		{"sequence.pbtxt", "accumulator", "sequence.json"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := modelconfig.ToJSON(normalized(t, tt.file, tt.model))
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", tt.golden)
			if *update {
				if err := os.WriteFile(path, append(got, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, bytes.TrimSuffix(want, []byte("\n"))) {
				t.Errorf("ToJSON =\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// TestToJSONShape checks, through a generic JSON decoder (what a Python
// model's json.loads sees), the properties Triton's form has.
func TestToJSONShape(t *testing.T) {
	decode := func(t *testing.T, cfg *inferencepb.ModelConfig) map[string]any {
		t.Helper()
		data, err := modelconfig.ToJSON(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("ToJSON produced invalid JSON: %v\n%s", err, data)
		}
		return m
	}
	get := func(v any, path ...any) any {
		for _, p := range path {
			switch k := p.(type) {
			case string:
				obj, _ := v.(map[string]any)
				v = obj[k]
			case int:
				arr, _ := v.([]any)
				if k >= len(arr) {
					return nil
				}
				v = arr[k]
			}
		}
		return v
	}
	addSub := decode(t, normalized(t, "add_sub.pbtxt", "add_sub"))
	dyn := decode(t, normalized(t, "dynamic_batching.pbtxt", "text_classifier"))
	seq := decode(t, normalized(t, "sequence.pbtxt", "accumulator"))
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"dims are numbers", get(addSub, "input", 0, "dims", 0), 4.0},
		{"data_type by name", get(addSub, "input", 0, "data_type"), "TYPE_FP32"},
		{"zero max_batch_size printed", get(addSub, "max_batch_size"), 0.0},
		{"empty string printed", get(addSub, "platform"), ""},
		{"empty list printed", get(addSub, "batch_input"), []any{}},
		{"empty map printed", get(addSub, "parameters"), map[string]any{}},
		{"unset message left out", get(addSub, "dynamic_batching"), nil},
		{"unset message left out (transaction policy)", get(addSub, "model_transaction_policy"), nil},
		{"reshape shape is a list of numbers", get(dyn, "input", 0, "reshape", "shape"), []any{}},
		{"uint64 delay is a number", get(dyn, "dynamic_batching", "max_queue_delay_microseconds"), 100.0},
		{"uint64 priority level is a number", get(dyn, "dynamic_batching", "default_priority_level"), 2.0},
		{"queue policy timeout is a number", get(dyn, "dynamic_batching", "default_queue_policy", "default_timeout_microseconds"), 5000000.0},
		{"priority policy keyed by string", get(dyn, "dynamic_batching", "priority_queue_policy", "1", "default_timeout_microseconds"), 100.0},
		{"uint32 stays a number", get(dyn, "dynamic_batching", "default_queue_policy", "max_queue_size"), 16.0},
		{"parameters keep their shape", get(dyn, "parameters", "FORCE_CPU_ONLY_INPUT_TENSORS", "string_value"), "no"},
		{"idle time is a number", get(seq, "sequence_batching", "max_sequence_idle_microseconds"), 5000000.0},
		{"state dims are numbers", get(seq, "sequence_batching", "state", 0, "dims", 0), 1.0},
		// NOTE: Triton leaves these 64-bit fields as strings; so do we.
		{"initial state dims stay strings", get(seq, "sequence_batching", "state", 0, "initial_state", 0, "dims", 0), "1"},
		{"float pairs are numbers", get(seq, "sequence_batching", "control_input", 1, "control", 0, "fp32_false_true"), []any{0.0, 1.0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gj, _ := json.Marshal(tt.got)
			wj, _ := json.Marshal(tt.want)
			if !bytes.Equal(gj, wj) {
				t.Errorf("got %s, want %s", gj, wj)
			}
		})
	}
}

func TestJSONRoundTrip(t *testing.T) {
	files := []string{"add_sub.pbtxt", "decoupled_repeat.pbtxt", "dynamic_batching.pbtxt", "sequence.pbtxt", "go_identity.pbtxt"}
	for _, file := range files {
		t.Run(file, func(t *testing.T) {
			cfg := normalized(t, file, "m")
			data, err := modelconfig.ToJSON(cfg)
			if err != nil {
				t.Fatal(err)
			}
			back, err := modelconfig.FromJSON(data)
			if err != nil {
				t.Fatalf("FromJSON(ToJSON(cfg)): %v\n%s", err, data)
			}
			if !proto.Equal(back, cfg) {
				t.Errorf("round trip changed the config:\n got %v\nwant %v", back, cfg)
			}
			again, err := modelconfig.ToJSON(back)
			if err != nil || !bytes.Equal(again, data) {
				t.Errorf("ToJSON is not stable: %v\n%s\n%s", err, data, again)
			}
		})
	}
}

func TestFromJSON(t *testing.T) {
	tests := []struct {
		name    string
		json    string
		want    string // prototext of the expected config, when no error
		wantErr string
	}{
		{"proto names", `{"name":"m","max_batch_size":4,"input":[{"name":"x","data_type":"TYPE_FP32","dims":[2]}]}`,
			`name:"m" max_batch_size:4 input:{name:"x" data_type:TYPE_FP32 dims:2}`, ""},
		{"json names", `{"name":"m","maxBatchSize":4,"modelTransactionPolicy":{"decoupled":true}}`,
			`name:"m" max_batch_size:4 model_transaction_policy:{decoupled:true}`, ""},
		{"enums in any case", `{"input":[{"data_type":"type_fp32","format":"Format_NCHW"}],"instance_group":[{"kind":"kind_cpu"}]}`,
			`input:{data_type:TYPE_FP32 format:FORMAT_NCHW} instance_group:{kind:KIND_CPU}`, ""},
		{"enum inside a map value", `{"dynamic_batching":{"priority_queue_policy":{"2":{"timeout_action":"delay"}}}}`,
			`dynamic_batching:{priority_queue_policy:{key:2 value:{timeout_action:DELAY}}}`, ""},
		{"enum by number", `{"input":[{"data_type":13}]}`, `input:{data_type:TYPE_STRING}`, ""},
		{"64-bit integers as strings or numbers", `{"input":[{"dims":["-1",3]}],"dynamic_batching":{"max_queue_delay_microseconds":"250"}}`,
			`input:{dims:-1 dims:3} dynamic_batching:{max_queue_delay_microseconds:250}`, ""},
		{"nulls are unset", `{"name":"m","input":null,"version_policy":null}`, `name:"m"`, ""},
		{"empty object", `{}`, ``, ""},
		{"unknown field", "{\n  \"name\": \"m\",\n  \"input\": [{\"name\": \"x\",\n    \"dimz\": [4]}]\n}", "",
			`model config JSON:4: unknown field "dimz" in inference.ModelInput`},
		{"unknown top-level field", `{"nmae":"m"}`, "", `model config JSON:1: unknown field "nmae" in inference.ModelConfig`},
		{"unknown field in map value", `{"parameters":{"k":{"value":"v"}}}`, "", `model config JSON:1: unknown field "value" in inference.ModelParameter`},
		{"unknown enum value", `{"input":[{"data_type":"TYPE_FLOAT"}]}`, "", `model config JSON:1: invalid value for enum field data_type: "TYPE_FLOAT"`},
		{"wrong type", `{"max_batch_size":"eight"}`, "", `model config JSON:1: invalid value for int32 field max_batch_size: "eight"`},
		{"syntax error", `{"name":"m",}`, "", `model config JSON:1: syntax error: unexpected token }`},
		{"not an object", `[]`, "", `model config JSON:1: syntax error: unexpected token [`},
		{"empty input", " \n", "", `model config JSON: empty document`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := modelconfig.FromJSON([]byte(tt.json))
			if tt.wantErr != "" {
				assertErrorText(t, err, tt.wantErr, modelconfig.ErrParse, backendapi.InvalidArg)
				return
			}
			if err != nil {
				t.Fatalf("FromJSON: %v", err)
			}
			want := &inferencepb.ModelConfig{}
			if err := unmarshalText(tt.want, want); err != nil {
				t.Fatalf("bad test expectation: %v", err)
			}
			if !proto.Equal(cfg, want) {
				t.Errorf("FromJSON = %v\nwant       %v", cfg, want)
			}
		})
	}
}

// assertErrorText checks that err has the text want, then assertError.
func assertErrorText(t *testing.T, err error, want string, sentinel error, code backendapi.Code) {
	t.Helper()
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v\nwant    %s", err, want)
	}
	assertError(t, err, sentinel, code)
}

// assertError checks the sentinel and the client-facing code of err, and
// that the client sees the message without Go-style prefixes.
func assertError(t *testing.T, err, sentinel error, code backendapi.Code) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Errorf("errors.Is(%v, %v) = false", err, sentinel)
	}
	if got := backendapi.CodeOf(err); got != code {
		t.Errorf("CodeOf = %v, want %v", got, code)
	}
	if !errors.Is(err, code) {
		t.Errorf("errors.Is(err, %v) = false", code)
	}
	if backendapi.MessageOf(err) != err.Error() {
		t.Errorf("MessageOf = %q, Error = %q", backendapi.MessageOf(err), err.Error())
	}
}

func names(cfg *inferencepb.ModelConfig) string {
	var b bytes.Buffer
	for i, in := range cfg.GetInput() {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(in.GetName())
	}
	b.WriteString("->")
	for i, out := range cfg.GetOutput() {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(out.GetName())
	}
	return b.String()
}

func equalTo[T comparable](got []T, want ...T) bool { return slices.Equal(got, want) }

func unmarshalText(s string, m proto.Message) error { return prototext.Unmarshal([]byte(s), m) }
