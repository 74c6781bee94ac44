package openai

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"

	"github.com/stubvisor/stubvisor/backendapi"
)

// genSpec is one generation request, whatever endpoint it came from.
type genSpec struct {
	prompt      string
	stream      bool
	maxTokens   int64
	temperature *float64
	topP        *float64
	freqPenalty *float64
	presPenalty *float64
	seed        *int64
	stops       []string
	echo        *bool
	logprobs    int // top log-probabilities per token; 0: none
	lora        string
	loraIndex   int // 1-based index of the adapter, for lora_task_id
}

// vllmSampling is the vLLM backend's sampling_parameters input.
type vllmSampling struct {
	MaxTokens        int64    `json:"max_tokens"`
	Temperature      *float64 `json:"temperature,omitempty"`
	TopP             *float64 `json:"top_p,omitempty"`
	Seed             *int64   `json:"seed,omitempty"`
	Stop             []string `json:"stop,omitempty"`
	FrequencyPenalty *float64 `json:"frequency_penalty,omitempty"`
	PresencePenalty  *float64 `json:"presence_penalty,omitempty"`
	Logprobs         int      `json:"logprobs,omitempty"`
	LoraName         string   `json:"lora_name,omitempty"`
}

// buildGenRequest maps a generation onto the model's inputs. Only inputs
// the model declares are sent. In the TRT-LLM layout a sampling field the
// model has no input for travels as a request parameter instead, so a
// model that reads its settings from parameters still gets them.
func buildGenRequest(info *modelInfo, g *genSpec) (*backendapi.InferRequest, error) {
	req := &backendapi.InferRequest{ModelName: info.name}
	b := tensorBuilder{info: info, req: req}
	b.add("text_input", g.prompt)
	b.add("stream", g.stream)
	b.add("return_num_input_tokens", true)
	b.add("return_num_output_tokens", true)
	b.add("return_finish_reason", true)
	if g.echo != nil {
		b.add("exclude_input_in_output", !*g.echo)
	}
	if info.layout == layoutVLLM {
		sp := vllmSampling{MaxTokens: g.maxTokens, Temperature: g.temperature, TopP: g.topP, Seed: g.seed, Stop: g.stops,
			FrequencyPenalty: g.freqPenalty, PresencePenalty: g.presPenalty, Logprobs: g.logprobs, LoraName: g.lora}
		js, err := json.Marshal(sp)
		if err != nil {
			return nil, fmt.Errorf("openai: sampling_parameters: %w", err)
		}
		b.add("sampling_parameters", string(js))
		b.add("return_logprobs", g.logprobs > 0)
		return req, b.err
	}
	b.param("max_tokens", g.maxTokens)
	if g.temperature != nil {
		b.param("temperature", *g.temperature)
	}
	if g.topP != nil {
		b.param("top_p", *g.topP)
	}
	if g.freqPenalty != nil {
		b.param("frequency_penalty", *g.freqPenalty)
	}
	if g.presPenalty != nil {
		b.param("presence_penalty", *g.presPenalty)
	}
	if g.seed != nil {
		b.param("seed", *g.seed)
	}
	if len(g.stops) > 0 {
		b.addList("stop_words", g.stops)
	}
	if g.lora != "" {
		b.param("lora_task_id", int64(g.loraIndex))
	}
	return req, b.err
}

// tensorBuilder adds the inputs a model declares, in its declared types.
type tensorBuilder struct {
	info *modelInfo
	req  *backendapi.InferRequest
	err  error
}

// add sets a one-element input when the model declares it.
func (b *tensorBuilder) add(name string, v any) bool {
	meta, ok := b.info.inputs[name]
	if !ok || b.err != nil {
		return ok
	}
	data, err := encodeElement(meta.DataType, v)
	if err != nil {
		b.err = fmt.Errorf("openai: input '%s' of model '%s': %w", name, b.info.name, err)
		return true
	}
	b.req.Inputs = append(b.req.Inputs, backendapi.InputTensor{Name: name, DataType: meta.DataType, Shape: shapeFor(meta.Shape, 1), Data: data})
	return true
}

// param sets an input, or a request parameter when there is no input.
func (b *tensorBuilder) param(name string, v any) {
	if b.add(name, v) {
		return
	}
	if b.req.Parameters == nil {
		b.req.Parameters = map[string]any{}
	}
	b.req.Parameters[name] = v
}

// addList sets a BYTES input of several strings when the model declares it.
func (b *tensorBuilder) addList(name string, vs []string) {
	meta, ok := b.info.inputs[name]
	if !ok || b.err != nil {
		return
	}
	if meta.DataType != backendapi.TypeBytes {
		b.err = fmt.Errorf("openai: input '%s' of model '%s' must be BYTES", name, b.info.name)
		return
	}
	var data []byte
	for _, s := range vs {
		data = appendBytesElement(data, s)
	}
	b.req.Inputs = append(b.req.Inputs, backendapi.InputTensor{Name: name, DataType: meta.DataType, Shape: shapeFor(meta.Shape, len(vs)), Data: data})
}

// shapeFor is the declared shape with each variable dimension 1, except
// the last, which holds n elements.
func shapeFor(dims []int64, n int) []int64 {
	shape := make([]int64, len(dims))
	for i, d := range dims {
		shape[i] = d
		if d < 0 {
			shape[i] = 1
		}
	}
	if n != 1 && len(shape) > 0 {
		shape[len(shape)-1] = int64(n)
	}
	if len(shape) == 0 {
		shape = []int64{int64(n)}
	}
	return shape
}

func appendBytesElement(dst []byte, s string) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(s)))
	return append(dst, s...)
}

// encodeElement encodes one value (string, bool, int64 or float64) as an
// element of type dt.
func encodeElement(dt backendapi.DataType, v any) ([]byte, error) {
	var f float64
	switch x := v.(type) {
	case string:
		if dt != backendapi.TypeBytes {
			return nil, fmt.Errorf("a string needs a BYTES input, not %s", dt)
		}
		return appendBytesElement(nil, x), nil
	case bool:
		if dt != backendapi.TypeBool {
			return nil, fmt.Errorf("a boolean needs a BOOL input, not %s", dt)
		}
		if x {
			return []byte{1}, nil
		}
		return []byte{0}, nil
	case int64:
		f = float64(x)
	case float64:
		f = x
	default:
		return nil, fmt.Errorf("cannot encode %T", v)
	}
	le := binary.LittleEndian
	switch dt {
	case backendapi.TypeInt32:
		return le.AppendUint32(nil, uint32(int32(f))), nil
	case backendapi.TypeInt64:
		return le.AppendUint64(nil, uint64(int64(f))), nil
	case backendapi.TypeUint32:
		return le.AppendUint32(nil, uint32(f)), nil
	case backendapi.TypeUint64:
		if i, ok := v.(int64); ok {
			return le.AppendUint64(nil, uint64(i)), nil
		}
		return le.AppendUint64(nil, uint64(f)), nil
	case backendapi.TypeFP32:
		return le.AppendUint32(nil, math.Float32bits(float32(f))), nil
	case backendapi.TypeFP64:
		return le.AppendUint64(nil, math.Float64bits(f)), nil
	}
	return nil, fmt.Errorf("a number needs a numeric input, not %s", dt)
}

// outputText returns the first element of a BYTES output, and whether the
// response has it.
func outputText(resp *backendapi.InferResponse, name string) (string, bool) {
	for i := range resp.Outputs {
		o := &resp.Outputs[i]
		if o.Name != name {
			continue
		}
		if o.DataType != backendapi.TypeBytes || len(o.Data) < 4 {
			return "", false
		}
		n := binary.LittleEndian.Uint32(o.Data)
		if int(n) > len(o.Data)-4 {
			return "", false
		}
		return string(o.Data[4 : 4+n]), true
	}
	return "", false
}

// outputCount returns the first element of an integer output (Triton's
// frontend reads num_input_tokens and num_output_tokens as INT32 or
// UINT32; other integer types are read too).
func outputCount(resp *backendapi.InferResponse, name string) (int64, bool) {
	for i := range resp.Outputs {
		o := &resp.Outputs[i]
		if o.Name != name || len(o.Data) < o.DataType.Size() {
			continue
		}
		le := binary.LittleEndian
		switch o.DataType {
		case backendapi.TypeInt32:
			return int64(int32(le.Uint32(o.Data))), true
		case backendapi.TypeUint32:
			return int64(le.Uint32(o.Data)), true
		case backendapi.TypeInt64, backendapi.TypeUint64:
			return int64(le.Uint64(o.Data)), true
		}
	}
	return 0, false
}
