package server

import (
	"sort"
	"strconv"

	"github.com/stubvisor/stubvisor/backendapi"
)

// This file converts between the generate extension's flat JSON objects and
// inference requests and responses (extension_generate.md). A request key
// that names a model input becomes that input (a scalar or a list; BYTES
// elements are strings); "parameters" is an object whose members are mapped
// the same way; every other key becomes a request parameter. A response
// becomes one object whose keys are "id", "model_name", "model_version", the
// response parameters and the outputs (an output of one element as a scalar),
// in key order, as Triton writes them.

// genKeyParameters is the one nested keyword of the request schema.
const genKeyParameters = "parameters"

// genRequest is a generate request being converted.
type genRequest struct {
	sc       jsonScanner
	inputs   map[string]*backendapi.TensorMetadata
	req      backendapi.InferRequest
	seen     map[string]bool
	consumed int64 // input bytes so far, against maxInput
	maxInput int64
}

// parseGenerateRequest converts a generate request body for the model whose
// metadata is md. An empty body is an empty object. Syntax errors come
// first (the document is parsed before it is converted), then conversion
// errors in member order.
func parseGenerateRequest(body []byte, md *backendapi.ModelMetadata, maxInput int64) (*backendapi.InferRequest, error) {
	g := &genRequest{inputs: make(map[string]*backendapi.TensorMetadata, len(md.Inputs)), seen: map[string]bool{}, maxInput: maxInput}
	for i := range md.Inputs {
		g.inputs[md.Inputs[i].Name] = &md.Inputs[i]
	}
	if len(body) == 0 {
		return &g.req, nil
	}
	sc := &g.sc
	sc.reset(body)
	if err := sc.begin(); err != nil {
		return nil, err
	}
	isObject := sc.kind() == kindObject
	if err := sc.skipValue(); err != nil {
		return nil, err
	}
	if err := sc.end(); err != nil {
		return nil, err
	}
	if !isObject {
		return nil, invalidArg("%s", msgNotObject)
	}
	sc.reset(body)
	sc.skipWS()
	if err := g.convertObject(true); err != nil {
		return nil, err
	}
	return &g.req, nil
}

// convertObject maps the members of the object at the scanner's position.
// top is the request object itself, where "id" and "parameters" are
// keywords.
func (g *genRequest) convertObject(top bool) error {
	sc := &g.sc
	return sc.members(func(k []byte, _ int) error {
		key := string(k)
		if top && key == genKeyParameters {
			if _, isInput := g.inputs[key]; isInput {
				return invalidArg("Keyword '%s' for nested schema also given as input tensor name", key)
			}
			if sc.kind() != kindObject {
				return invalidArg("Expected JSON object for keyword: '%s': %s", key, msgNotObject)
			}
			if err := g.convertObject(false); err != nil {
				return invalidArg("Converting keyword: '%s': %s", key, backendapi.MessageOf(err))
			}
			return nil
		}
		if top && key == "id" {
			if sc.kind() != kindString {
				return fieldError("Unable to parse 'id'", msgNotString)
			}
			start := sc.pos
			b, err := sc.readString()
			if err != nil {
				return err
			}
			g.req.ID = string(b)
			sc.pos = start // the id is also a parameter, as in Triton
		}
		return g.mapMember(key)
	})
}

// mapMember maps one member: to the input of that name, or to a parameter.
func (g *genRequest) mapMember(key string) error {
	meta, isInput := g.inputs[key]
	if !isInput {
		v, err := g.sc.readParamValue()
		if err != nil {
			return err
		}
		if _, bad := v.(badParam); bad {
			return invalidArg("parameter '%s' has invalid type. It should be either 'int', 'bool', or 'string'.", key)
		}
		if g.req.Parameters == nil {
			g.req.Parameters = map[string]any{}
		}
		g.req.Parameters[key] = v
		return nil
	}
	if g.seen[key] {
		return invalidArg("input '%s' already exists in request", key)
	}
	g.seen[key] = true
	return g.addInput(meta)
}

// addInput decodes the value at the scanner's position into the input meta
// describes, shaped to fit the model's dimensions.
func (g *genRequest) addInput(meta *backendapi.TensorMetadata) error {
	sc := &g.sc
	dt := meta.DataType
	if !decodable(dt) {
		if err := sc.skipValue(); err != nil {
			return err
		}
		return invalidArg("input '%s' has unsupported datatype %s", meta.Name, dt)
	}
	var data []byte
	var count int64
	var err error
	if sc.kind() == kindArray {
		data, count, err = decodeJSONData(nil, sc, dt, -1)
	} else {
		data, err = decodeJSONElement(nil, sc, dt)
		count = 1
	}
	if err != nil {
		return err
	}
	size := int64(len(data))
	if g.consumed+size > g.maxInput {
		return invalidArg("request size of %d bytes with input '%s' of size %d bytes exceeds the maximum allowed input size of %d. Use --http-max-input-size to increase the limit.",
			g.consumed, meta.Name, size, g.maxInput)
	}
	g.consumed += size
	shape, ok := genShape(meta.Shape, count)
	if !ok {
		return invalidArg("The schema can not convert input '%s' to tensor with proper shape", meta.Name)
	}
	g.req.Inputs = append(g.req.Inputs, backendapi.InputTensor{Name: meta.Name, DataType: dt, Shape: shape, Data: data})
	return nil
}

// genShape fits count elements to the model's dims as Triton does: the
// fixed dimensions take their share first, then the innermost variable
// dimension takes the rest and the other variable ones are 1.
func genShape(dims []int64, count int64) ([]int64, bool) {
	shape := append([]int64(nil), dims...)
	left := count
	for i := len(shape) - 1; i >= 0; i-- {
		if d := shape[i]; d != -1 {
			if d == 0 {
				if left != 0 {
					return nil, false
				}
				continue
			}
			if left%d != 0 {
				return nil, false
			}
			left /= d
		}
	}
	for i := len(shape) - 1; i >= 0; i-- {
		if shape[i] == -1 {
			shape[i] = left
			left = 1
		}
	}
	return shape, left == 1 || count == 0
}

// genField is one key of a generate response: a reserved field, a
// response parameter or an output.
type genField struct {
	key    string
	kind   uint8 // genReserved, genParam, genOutput
	value  string
	param  any
	output *backendapi.OutputTensor
}

const (
	genReserved uint8 = iota
	genParam
	genOutput
)

// appendGenerateResponse appends the JSON object of one response. reqID is
// the request's id, used when the response does not carry one.
func appendGenerateResponse(dst []byte, resp *backendapi.InferResponse, model, reqID string) ([]byte, error) {
	fields := make([]genField, 0, 3+len(resp.Parameters)+len(resp.Outputs))
	id := resp.ID
	if id == "" {
		id = reqID
	}
	if id != "" {
		fields = append(fields, genField{key: "id", kind: genReserved, value: id})
	}
	name := resp.ModelName
	if name == "" {
		name = model
	}
	fields = append(fields,
		genField{key: "model_name", kind: genReserved, value: name},
		genField{key: "model_version", kind: genReserved, value: strconv.FormatInt(resp.ModelVersion, 10)})
	for k, v := range resp.Parameters {
		fields = append(fields, genField{key: k, kind: genParam, param: v})
	}
	for i := range resp.Outputs {
		fields = append(fields, genField{key: resp.Outputs[i].Name, kind: genOutput, output: &resp.Outputs[i]})
	}
	// Keys in order; where a key repeats, the first one set wins (reserved
	// fields, then parameters, then outputs), as in Triton's map.
	sort.SliceStable(fields, func(i, j int) bool { return fields[i].key < fields[j].key })
	dst = append(dst, '{')
	wrote := false
	for i := range fields {
		f := &fields[i]
		if i > 0 && fields[i-1].key == f.key {
			continue
		}
		dst = appendJSONKey(dst, !wrote, f.key)
		wrote = true
		switch f.kind {
		case genReserved:
			dst = appendJSONString(dst, f.value)
		case genParam:
			dst = appendJSONValue(dst, f.param)
		default:
			var err error
			if dst, err = appendGenerateOutput(dst, f.output); err != nil {
				return dst, err
			}
		}
	}
	return append(dst, '}'), nil
}

// appendGenerateOutput appends an output's data: a flat array, or the
// element itself when there is exactly one.
func appendGenerateOutput(dst []byte, o *backendapi.OutputTensor) ([]byte, error) {
	if o.SharedMemory != nil {
		return dst, backendapi.Errorf(backendapi.Internal, "non-JSON output response type is requested for '%s'", o.Name)
	}
	count := elementCount(o.Shape)
	start := len(dst)
	dst, err := appendJSONData(dst, o.Name, o.DataType, o.Data, count)
	if err != nil || count != 1 {
		return dst, err
	}
	// Strip the brackets of a one-element array.
	copy(dst[start:], dst[start+1:len(dst)-1])
	return dst[:len(dst)-2], nil
}
