// Package signature holds a model's inputs and outputs as the request path
// needs them, precomputed at load from its configuration, and checks a
// request against them (names, datatypes, shapes, batch size, byte sizes)
// with Triton's texts. It knows nothing of stubs or schedulers, so a
// request is refused here before anything is queued.
package signature

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

// ioSpec is a model input or output as the validator needs it.
type ioSpec struct {
	name     string
	dtype    backendapi.DataType
	dims     []int64 // without the batch dimension
	optional bool
}

// Signature is a model's inputs and outputs, precomputed at load so the
// request path does no config lookups.
type Signature struct {
	model    string
	maxBatch int64
	inputs   []ioSpec
	outputs  []ioSpec
	// controlInputs are filled in by the sequence batcher, not the client.
	controlInputs map[string]bool
}

func New(cfg *inferencepb.ModelConfig) *Signature {
	s := &Signature{model: cfg.GetName(), maxBatch: int64(cfg.GetMaxBatchSize())}
	for _, in := range cfg.GetInput() {
		s.inputs = append(s.inputs, ioSpec{name: in.GetName(), dtype: ConfigType(in.GetDataType()), dims: in.GetDims(), optional: in.GetOptional()})
	}
	for _, out := range cfg.GetOutput() {
		s.outputs = append(s.outputs, ioSpec{name: out.GetName(), dtype: ConfigType(out.GetDataType()), dims: out.GetDims()})
	}
	if sb := cfg.GetSequenceBatching(); sb != nil {
		s.controlInputs = map[string]bool{}
		for _, c := range sb.GetControlInput() {
			s.controlInputs[c.GetName()] = true
		}
	}
	return s
}

func ConfigType(t inferencepb.DataType) backendapi.DataType {
	return backendapi.ParseDataType(t.String())
}

// MaxBatch is the model's max_batch_size (0: no batch dimension).
func (s *Signature) MaxBatch() int64 { return s.maxBatch }

func (s *Signature) input(name string) *ioSpec {
	for i := range s.inputs {
		if s.inputs[i].name == name {
			return &s.inputs[i]
		}
	}
	return nil
}

func (s *Signature) output(name string) *ioSpec {
	for i := range s.outputs {
		if s.outputs[i].name == name {
			return &s.outputs[i]
		}
	}
	return nil
}

// validate checks a request against the model's signature with the texts
// Triton's core uses, and returns the request's batch size (1 for models
// without batching).
func (s *Signature) Validate(req *backendapi.InferRequest) (batch int64, err error) {
	batch = 1
	// Triton checks the names first, then the number of inputs, then each
	// input: a request short of an input is told what is missing even when
	// another input has the wrong type.
	for i := range req.Inputs {
		if name := req.Inputs[i].Name; s.input(name) == nil || s.controlInputs[name] {
			return 0, backendapi.Errorf(backendapi.InvalidArg, "unexpected inference input '%s' for model '%s'", name, s.model)
		}
	}
	required, total := s.inputCounts()
	if n := len(req.Inputs); n < required || n > total {
		return 0, s.missingInputs(req, required, total)
	}
	seen := make(map[string]bool, len(req.Inputs))
	for i := range req.Inputs {
		in := &req.Inputs[i]
		spec := s.input(in.Name)
		if seen[in.Name] {
			return 0, backendapi.Errorf(backendapi.InvalidArg, "input '%s' is specified more than once for model '%s'", in.Name, s.model)
		}
		seen[in.Name] = true
		if in.DataType != spec.dtype {
			return 0, backendapi.Errorf(backendapi.InvalidArg, "inference input '%s' data-type is '%s', but model '%s' expects '%s'", in.Name, in.DataType, s.model, spec.dtype)
		}
		shape := in.Shape
		if s.maxBatch > 0 {
			if len(shape) == 0 {
				return 0, backendapi.Errorf(backendapi.InvalidArg, "inference input '%s' for model '%s' has no batch dimension: the model's max_batch_size is %d", in.Name, s.model, s.maxBatch)
			}
			if i == 0 {
				batch = shape[0]
			} else if shape[0] != batch {
				return 0, backendapi.Errorf(backendapi.InvalidArg, "inference input '%s' for model '%s' has batch size %d, but other inputs have batch size %d", in.Name, s.model, shape[0], batch)
			}
			shape = shape[1:]
		}
		if !dimsMatch(spec.dims, shape) {
			return 0, backendapi.Errorf(backendapi.InvalidArg, "unexpected shape for input '%s' for model '%s'. Expected %s, got %s", in.Name, s.model, formatDims(s.fullDims(spec.dims)), formatDims(in.Shape))
		}
		if in.SharedMemory == nil {
			if err := checkByteSize(in, s.model); err != nil {
				return 0, err
			}
		}
	}
	if s.maxBatch > 0 && (batch < 1 || batch > s.maxBatch) {
		return 0, backendapi.Errorf(backendapi.InvalidArg, "inference request batch-size must be <= %d for '%s'", s.maxBatch, s.model)
	}
	for _, spec := range s.inputs {
		if !spec.optional && !s.controlInputs[spec.name] && !seen[spec.name] {
			return 0, s.missingInputs(req, required, total)
		}
	}
	for _, out := range req.Outputs {
		if s.output(out.Name) == nil {
			return 0, backendapi.Errorf(backendapi.InvalidArg, "unexpected inference output '%s' for model '%s'", out.Name, s.model)
		}
	}
	return batch, nil
}

// inputCounts returns how many inputs a request must and may give (control
// inputs of the sequence batcher are the server's, not the client's).
func (s *Signature) inputCounts() (required, total int) {
	for _, spec := range s.inputs {
		if s.controlInputs[spec.name] {
			continue
		}
		total++
		if !spec.optional {
			required++
		}
	}
	return required, total
}

// missingInputs is Triton's answer to a request that lacks a required
// input or gives too many.
func (s *Signature) missingInputs(req *backendapi.InferRequest, required, total int) error {
	given := make(map[string]bool, len(req.Inputs))
	got := make([]string, 0, len(req.Inputs))
	for _, in := range req.Inputs {
		given[in.Name] = true
		got = append(got, "'"+in.Name+"'")
	}
	var missing []string
	for _, spec := range s.inputs {
		if !spec.optional && !s.controlInputs[spec.name] && !given[spec.name] {
			missing = append(missing, "'"+spec.name+"'")
		}
	}
	// Triton names the range when the model has optional inputs.
	expected := fmt.Sprintf("expected %d inputs", required)
	if total > required {
		expected = fmt.Sprintf("expected number of inputs between %d and %d", required, total)
	}
	return backendapi.Errorf(backendapi.InvalidArg, "%s but got %d inputs for model '%s'. Got input(s) [%s], but missing required input(s) [%s]. Please provide all required input(s).",
		expected, len(req.Inputs), s.model, strings.Join(got, ","), strings.Join(missing, ","))
}

func (s *Signature) fullDims(dims []int64) []int64 {
	if s.maxBatch > 0 {
		return append([]int64{-1}, dims...)
	}
	return dims
}

func dimsMatch(want, got []int64) bool {
	if len(want) != len(got) {
		return false
	}
	for i := range want {
		if got[i] < 0 || (want[i] >= 0 && want[i] != got[i]) {
			return false
		}
	}
	return true
}

func formatDims(d []int64) string {
	parts := make([]string, len(d))
	for i, v := range d {
		parts[i] = fmt.Sprint(v)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// elementCount returns the number of elements of shape.
func ElementCount(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

// checkByteSize verifies that in.Data holds exactly the tensor its shape and
// type describe; for BYTES, that it is a well-formed sequence of
// length-prefixed elements of the right count.
func checkByteSize(in *backendapi.InputTensor, model string) error {
	n := ElementCount(in.Shape)
	if in.DataType != backendapi.TypeBytes {
		want := n * int64(in.DataType.Size())
		if int64(len(in.Data)) != want {
			return backendapi.Errorf(backendapi.InvalidArg, "input byte size mismatch for input '%s' for model '%s'. Expected %d, got %d", in.Name, model, want, len(in.Data))
		}
		return nil
	}
	data := in.Data
	var count int64
	for len(data) > 0 {
		if len(data) < 4 {
			return backendapi.Errorf(backendapi.InvalidArg, "incomplete string length indicator for inference input '%s' for model '%s', expecting 4 bytes but only %d bytes available", in.Name, model, len(data))
		}
		l := int64(binary.LittleEndian.Uint32(data))
		if l > int64(len(data)-4) {
			return backendapi.Errorf(backendapi.InvalidArg, "incomplete string data for inference input '%s' for model '%s', expecting string of length %d but only %d bytes available", in.Name, model, l, len(data)-4)
		}
		data = data[4+l:]
		count++
	}
	if count != n {
		return backendapi.Errorf(backendapi.InvalidArg, "unexpected number of string elements %d for inference input '%s' for model '%s', expecting %d", count, in.Name, model, n)
	}
	return nil
}
