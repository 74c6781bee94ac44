package modelconfig

import (
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/stubvisor/stubvisor/backendapi"
)

// FuzzParse feeds arbitrary config.pbtxt files to the parser. It must never
// panic; a refusal must be a client error naming the file; and a config it
// accepts, once normalized and valid, must survive the trip through the
// JSON form the stubs and the config endpoint use.
func FuzzParse(f *testing.F) {
	seeds, err := filepath.Glob(filepath.Join("testdata", "*.pbtxt"))
	if err != nil {
		f.Fatal(err)
	}
	for _, path := range seeds {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		"", "\ufeffname: \"m\"", "input [{ name: \"A\" dims: [-1] }]; output: [{}]",
		"parameters { key: \"K\" value { string_value: \"v\" } }",
		"instance_group [{ count: 2 kind: KIND_CPU }]",
		"dynamic_batching { preferred_batch_size: [2, 4] max_queue_delay_microseconds: 100 }",
		"sequence_batching { oldest { max_candidate_sequences: 4 } control_input [{ name: \"START\" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] }] }] }",
		"model_transaction_policy { decoupled: true } # comment",
		"name: \"x\" name: \"y\"", "dims: [1, 2", "max_batch_size: -1", "input [{ data_type: TYPE_FP32 dims: [ 1 ] reshape: { shape: [ ] } }]",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("config.pbtxt", data)
		if err != nil {
			if c := backendapi.CodeOf(err); c != backendapi.InvalidArg {
				t.Fatalf("parse error %q has class %v, want INVALID_ARG", err, c)
			}
			return
		}
		Normalize(cfg, filepath.Join(t.TempDir(), "fuzzed"))
		if Validate(cfg) != nil {
			return
		}
		js, err := ToJSON(cfg)
		if err != nil {
			t.Fatalf("ToJSON of a valid config: %v", err)
		}
		back, err := FromJSON(js)
		if err != nil {
			t.Fatalf("FromJSON(ToJSON(cfg)): %v\n%s", err, js)
		}
		if !proto.Equal(cfg, back) {
			t.Fatalf("config changed through JSON:\n%v\n%v", cfg, back)
		}
	})
}
