package server

import (
	"math"
	"sync"

	"github.com/stubvisor/stubvisor/backendapi"
)

// outKind is how one output travels back to an HTTP client.
type outKind uint8

const (
	outDefault outKind = iota // as the request's binary_data_output says
	outJSON                   // a JSON `data` array
	outBinary                 // binary tensor data after the JSON header
	outSHM                    // written into a registered shared-memory region
)

// inputSlot records where an input's shape (and, for JSON data, its bytes)
// live in the call's buffers. Slices are taken only once parsing is done,
// because the buffers may move while they grow.
type inputSlot struct {
	shapeAt, shapeEnd int
	dataAt, dataEnd   int
	jsonData          bool
}

// inferCall is the pooled per-request state of an HTTP infer: the body,
// the decoded tensors, the request handed to the backend and the response
// header being built. Reusing it keeps the hot path nearly allocation-free.
// The request (and every slice it holds) is valid only until the call is
// returned to the pool, after the response has been written.
type inferCall struct {
	body        []byte
	inflated    []byte
	arena       []byte
	shapes      []int64
	slots       []inputSlot
	kinds       []outKind
	req         backendapi.InferRequest
	defaultKind outKind
	sc          jsonScanner
	out         []byte
}

// maxPooledBuffer caps the buffers a pooled call keeps, so that one huge
// request does not pin its memory for the life of the process.
const maxPooledBuffer = 4 << 20

var callPool = sync.Pool{New: func() any { return new(inferCall) }}

func getCall() *inferCall { return callPool.Get().(*inferCall) }

func putCall(c *inferCall) {
	clear(c.req.Inputs)
	clear(c.req.Outputs)
	c.req = backendapi.InferRequest{Inputs: c.req.Inputs[:0], Outputs: c.req.Outputs[:0]}
	c.body = trimPooled(c.body)
	c.inflated = trimPooled(c.inflated)
	c.arena = trimPooled(c.arena)
	c.out = trimPooled(c.out)
	c.shapes = c.shapes[:0]
	c.slots = c.slots[:0]
	c.kinds = c.kinds[:0]
	c.defaultKind = outDefault
	c.sc = jsonScanner{tmp: trimPooled(c.sc.tmp)}
	callPool.Put(c)
}

func trimPooled(b []byte) []byte {
	if cap(b) > maxPooledBuffer {
		return nil
	}
	return b[:0]
}

// inputContentError is Triton's text for an input that does not set exactly
// one of its three data sources.
func inputContentError(data, binary, shm bool) error {
	msg := "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'. But"
	if !data && !binary && !shm {
		return invalidArg("%s no field is set", msg)
	}
	msg += " set"
	if data {
		msg += " 'data'"
	}
	if binary {
		msg += " 'binary_data_size'"
	}
	if shm {
		msg += " 'shared_memory_region'"
	}
	return invalidArg("%s", msg)
}

func missingMember(context, name string) error {
	return fieldError(context, "attempt to access non-existing object member '"+name+"'")
}

// parseInferHeader parses the JSON header of an infer request into c.req
// and c.kinds. bin is the binary part of the body, consumed by inputs with
// binary_data_size in order; hdrGiven says whether the client sent
// Inference-Header-Content-Length. Syntax errors are reported first, then
// content errors in the order Triton checks them: id, parameters, inputs,
// outputs.
func (c *inferCall) parseInferHeader(model string, hdr, bin []byte, hdrGiven bool) error {
	sc := &c.sc
	sc.reset(hdr)
	if err := sc.begin(); err != nil {
		return err
	}
	if sc.kind() != kindObject {
		if err := sc.skipValue(); err != nil {
			return err
		}
		if err := sc.end(); err != nil {
			return err
		}
		return missingMember("Unable to parse 'inputs'", "inputs")
	}
	var idErr, paramsErr, inputsErr, outputsErr error
	sawInputs := false
	sc.enter()
	for first := true; ; first = false {
		key, ok, err := sc.objectKey(first)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		start := sc.pos
		var fieldErr *error
		switch string(key) {
		case "id":
			fieldErr = &idErr
			if sc.kind() != kindString {
				err = fieldError("Unable to parse 'id'", msgNotString)
				break
			}
			var b []byte
			if b, err = sc.readString(); err == nil {
				c.req.ID = string(b)
			}
		case "parameters":
			fieldErr = &paramsErr
			err = c.parseRequestParams()
		case "inputs":
			fieldErr = &inputsErr
			sawInputs = true
			c.req.Inputs = c.req.Inputs[:0]
			c.slots = c.slots[:0]
			err = c.parseInputs(model, &bin, hdrGiven)
		case "outputs":
			fieldErr = &outputsErr
			c.req.Outputs = c.req.Outputs[:0]
			c.kinds = c.kinds[:0]
			err = c.parseOutputs()
		default:
			err = sc.skipValue()
		}
		if err == nil {
			continue
		}
		if isSyntaxError(err) {
			return err
		}
		// A content error: note it, then make sure the rest of the value
		// is well-formed JSON (a syntax error anywhere wins).
		if *fieldErr == nil {
			*fieldErr = err
		}
		sc.pos = start
		if err := sc.skipValue(); err != nil {
			return err
		}
	}
	if err := sc.end(); err != nil {
		return err
	}
	if !sawInputs && inputsErr == nil {
		inputsErr = missingMember("Unable to parse 'inputs'", "inputs")
	}
	if inputsErr == nil && len(bin) > 0 {
		inputsErr = invalidArg("unexpected additional input data for model '%s'", model)
	}
	for _, err := range [...]error{idErr, paramsErr, inputsErr, outputsErr} {
		if err != nil {
			return err
		}
	}
	c.fixup()
	return nil
}

// fixup points the inputs at their shapes and decoded bytes.
func (c *inferCall) fixup() {
	for i := range c.slots {
		sl := &c.slots[i]
		in := &c.req.Inputs[i]
		in.Shape = c.shapes[sl.shapeAt:sl.shapeEnd:sl.shapeEnd]
		if sl.jsonData {
			in.Data = c.arena[sl.dataAt:sl.dataEnd:sl.dataEnd]
		}
	}
}

// parseRequestParams reads the request-level "parameters" object.
func (c *inferCall) parseRequestParams() error {
	sc := &c.sc
	if sc.kind() != kindObject {
		if err := sc.skipValue(); err != nil {
			return err
		}
		return fieldError("failed to get request params.", "attempt to get members for non-object")
	}
	var firstErr error
	sc.enter()
	for first := true; ; first = false {
		k, ok, err := sc.objectKey(first)
		if err != nil {
			return err
		}
		if !ok {
			return firstErr
		}
		key := string(k)
		v, err := sc.readParamValue()
		if err != nil {
			return err
		}
		if firstErr != nil {
			continue
		}
		if key == ParamBinaryDataOutput {
			if b, ok := v.(bool); ok && b {
				c.defaultKind = outBinary
			} else {
				c.defaultKind = outDefault
			}
		}
		firstErr = ApplyRequestParameter(&c.req, key, v)
	}
}

func (c *inferCall) parseInputs(model string, bin *[]byte, hdrGiven bool) error {
	return c.parseArray("Unable to parse 'inputs'", func() error { return c.parseInput(model, bin, hdrGiven) })
}

// parseArray reads a JSON array with each, one element at a time. After
// the first content error the other elements are only skipped, and that
// error is returned once the array is read; a syntax error ends at once.
func (c *inferCall) parseArray(context string, each func() error) error {
	sc := &c.sc
	if sc.kind() != kindArray {
		if err := sc.skipValue(); err != nil {
			return err
		}
		return fieldError(context, msgNotArray)
	}
	var firstErr error
	sc.enter()
	for first := true; ; first = false {
		more, err := sc.arrayNext(first)
		if err != nil {
			return err
		}
		if !more {
			return firstErr
		}
		if firstErr != nil {
			if err := sc.skipValue(); err != nil {
				return err
			}
			continue
		}
		if err := each(); err != nil {
			if isSyntaxError(err) {
				return err
			}
			firstErr = err
		}
	}
}

// inputFields collects one input object's members before they are checked.
type inputFields struct {
	name, datatype                 string
	hasName, hasDatatype, hasShape bool
	nameErr, datatypeErr, shapeErr error
	paramsErr                      error
	hasData, hasBinary, hasRegion  bool
	binarySize, shmOffset, shmSize uint64
	region                         string
	dataStart                      int
	decoded                        bool // data was decoded while scanning
	decodeErr                      error
	dataAt, dataEnd                int
	decodedCount                   int64
	shapeAt                        int
}

// parseInput reads one element of "inputs" and appends it to the request.
// The scanner ends after the element even when its content is wrong.
func (c *inferCall) parseInput(model string, bin *[]byte, hdrGiven bool) error {
	sc := &c.sc
	if sc.kind() != kindObject {
		if err := sc.skipValue(); err != nil {
			return err
		}
		return inputContentError(false, false, false)
	}
	f := inputFields{shapeAt: len(c.shapes)}
	sc.enter()
	for first := true; ; first = false {
		key, ok, err := sc.objectKey(first)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		start := sc.pos
		var fieldErr *error
		switch string(key) {
		case "name":
			fieldErr = &f.nameErr
			f.hasName = true
			f.name, err = c.readStringField("Unable to parse 'name'")
		case "datatype":
			fieldErr = &f.datatypeErr
			f.hasDatatype = true
			f.datatype, err = c.readStringField("Unable to parse 'datatype'")
		case "shape":
			fieldErr = &f.shapeErr
			f.hasShape = true
			c.shapes = c.shapes[:f.shapeAt]
			err = c.readShape()
		case "parameters":
			fieldErr = &f.paramsErr
			err = c.readInputParams(&f)
		case "data":
			f.hasData = true
			err = c.readInputData(&f)
		default:
			err = sc.skipValue()
		}
		if fieldErr == nil {
			if err != nil {
				return err // an unknown member's value is malformed JSON
			}
			continue
		}
		if err := c.settle(start, fieldErr, err); err != nil {
			return err
		}
	}
	return c.addInput(model, &f, bin, hdrGiven)
}

func (c *inferCall) readStringField(context string) (string, error) {
	if c.sc.kind() != kindString {
		return "", fieldError(context, msgNotString)
	}
	b, err := c.sc.readString()
	return string(b), err
}

// readUintField reads a non-negative integer.
func (c *inferCall) readUintField(context string) (uint64, error) {
	if c.sc.kind() != kindNumber {
		return 0, fieldError(context, msgNotUint)
	}
	n, err := c.sc.readNumber()
	if err != nil {
		return 0, err
	}
	v, ok := n.uint64()
	if !ok {
		return 0, fieldError(context, msgNotUint)
	}
	return v, nil
}

// readShape appends the dims of a "shape" array to c.shapes.
func (c *inferCall) readShape() error {
	sc := &c.sc
	if sc.kind() != kindArray {
		return fieldError("Unable to parse 'shape'", msgNotArray)
	}
	sc.enter()
	for first := true; ; first = false {
		more, err := sc.arrayNext(first)
		if err != nil || !more {
			return err
		}
		d, err := c.readUintField("Unable to parse 'shape'")
		if err != nil {
			return err
		}
		if d > math.MaxInt64 {
			return fieldError("Unable to parse 'shape'", msgNotUint)
		}
		c.shapes = append(c.shapes, int64(d))
	}
}

// readInputParams reads an input's "parameters": the binary tensor and
// shared memory keys; others are ignored.
func (c *inferCall) readInputParams(f *inputFields) error {
	sc := &c.sc
	if sc.kind() != kindObject {
		return fieldError("Unable to parse 'parameters'", msgNotObject)
	}
	var firstErr error
	sc.enter()
	for first := true; ; first = false {
		key, ok, err := sc.objectKey(first)
		if err != nil {
			return err
		}
		if !ok {
			return firstErr
		}
		start := sc.pos
		switch string(key) {
		case "binary_data_size":
			f.hasBinary = true
			f.binarySize, err = c.readUintField("Unable to parse 'binary_data_size'")
		case "shared_memory_region":
			f.hasRegion = true
			f.region, err = c.readStringField("Unable to parse 'shared_memory_region'")
		case "shared_memory_offset":
			f.shmOffset, err = c.readUintField("Unable to parse 'shared_memory_offset'")
		case "shared_memory_byte_size":
			f.shmSize, err = c.readUintField("Unable to parse 'shared_memory_byte_size'")
		default:
			err = sc.skipValue()
		}
		if err := c.settle(start, &firstErr, err); err != nil {
			return err
		}
	}
}

// settle handles the outcome of reading one member value that started at
// start: a syntax error is returned as fatal; a content error is kept in
// *slot (the first one wins) and the value is skipped so that scanning can
// go on.
func (c *inferCall) settle(start int, slot *error, err error) error {
	if err == nil {
		return nil
	}
	if isSyntaxError(err) {
		return err
	}
	if *slot == nil {
		*slot = err
	}
	c.sc.pos = start
	return c.sc.skipValue()
}

// decodable reports whether JSON data of this type can be decoded.
func decodable(dt backendapi.DataType) bool {
	return dt.Valid() && dt != backendapi.TypeFP16 && dt != backendapi.TypeBF16
}

// readInputData handles an input's "data". When the datatype is already
// known (clients write it first) the data is decoded in this one pass;
// otherwise it is validated and decoded once the object is complete.
func (c *inferCall) readInputData(f *inputFields) error {
	sc := &c.sc
	f.dataStart = sc.pos
	f.decoded, f.decodeErr = false, nil
	dt := ParseWireDataType(f.datatype)
	if !f.hasDatatype || f.datatypeErr != nil || !decodable(dt) {
		return sc.skipValue()
	}
	hint := int64(-1)
	if f.hasShape && f.shapeErr == nil {
		hint = ElementCount(c.shapes[f.shapeAt:])
	}
	f.dataAt = len(c.arena)
	var err error
	c.arena, f.decodedCount, err = decodeJSONData(c.arena, sc, dt, hint)
	f.dataEnd = len(c.arena)
	f.decoded = true
	if err == nil || isSyntaxError(err) {
		return err
	}
	// Wrong content: keep the error for its turn, and check the syntax.
	f.decodeErr = err
	sc.pos = f.dataStart
	return sc.skipValue()
}

// addInput checks a parsed input in Triton's order and appends it.
func (c *inferCall) addInput(model string, f *inputFields, bin *[]byte, hdrGiven bool) error {
	if n := btoi(f.hasData) + btoi(f.hasBinary) + btoi(f.hasRegion); n != 1 {
		return inputContentError(f.hasData, f.hasBinary, f.hasRegion)
	}
	switch {
	case f.nameErr != nil:
		return f.nameErr
	case !f.hasName:
		return missingMember("Unable to parse 'name'", "name")
	case f.datatypeErr != nil:
		return f.datatypeErr
	case !f.hasDatatype:
		return missingMember("Unable to parse 'datatype'", "datatype")
	case f.shapeErr != nil:
		return f.shapeErr
	case !f.hasShape:
		return missingMember("Unable to parse 'shape'", "shape")
	}
	for i := range c.req.Inputs {
		if c.req.Inputs[i].Name == f.name {
			return invalidArg("input '%s' already exists in request", f.name)
		}
	}
	if f.paramsErr != nil {
		return f.paramsErr
	}
	dt := ParseWireDataType(f.datatype)
	if !dt.Valid() {
		return invalidArg("invalid datatype for input %s", f.name)
	}
	in := backendapi.InputTensor{Name: f.name, DataType: dt}
	slot := inputSlot{shapeAt: f.shapeAt, shapeEnd: len(c.shapes)}
	shape := c.shapes[f.shapeAt:]
	switch {
	case f.hasBinary:
		if f.binarySize > 0 && !hdrGiven {
			return invalidArg("must specify valid 'Infer-Header-Content-Length' in request header and 'binary_data_size' when passing inputs in binary data format")
		}
		if f.binarySize > uint64(len(*bin)) {
			return invalidArg("unexpected size for input '%s', expecting %d additional bytes for model '%s'", f.name, f.binarySize-uint64(len(*bin)), model)
		}
		in.Data = (*bin)[:f.binarySize:f.binarySize]
		*bin = (*bin)[f.binarySize:]
		if f.binarySize == 0 {
			in.Data = []byte{}
		}
	case f.hasRegion:
		in.SharedMemory = &backendapi.SharedMemoryRef{Region: f.region, Offset: f.shmOffset, ByteSize: f.shmSize}
	default:
		switch dt {
		case backendapi.TypeFP16, backendapi.TypeBF16:
			return invalidArg("receiving %s data via JSON is not supported. Please use the binary data format for input %s", dt, f.name)
		}
		want := ElementCount(shape)
		if want == 0 {
			// Triton ignores the data of a zero-element tensor.
			in.Data = []byte{}
			break
		}
		if err := checkJSONInputSize(f.name, shape, want, dt); err != nil {
			return err
		}
		if !f.decoded {
			saved := c.sc.pos
			c.sc.pos = f.dataStart
			f.dataAt = len(c.arena)
			c.arena, f.decodedCount, f.decodeErr = decodeJSONData(c.arena, &c.sc, dt, want)
			f.dataEnd = len(c.arena)
			c.sc.pos = saved
		}
		if f.decodeErr != nil {
			return f.decodeErr
		}
		if f.decodedCount != want {
			return fieldError("Unable to parse 'data'", msgShapeMismatch)
		}
		slot.jsonData = true
		slot.dataAt, slot.dataEnd = f.dataAt, f.dataEnd
	}
	c.req.Inputs = append(c.req.Inputs, in)
	c.slots = append(c.slots, slot)
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// outputFields collects one requested output's members.
type outputFields struct {
	name               string
	hasName            bool
	nameErr, paramsErr error
	hasBinary, binary  bool
	binaryErr          error
	hasClass           bool
	class              uint64
	hasRegion          bool
	region             string
	shmOffset, shmSize uint64
}

func (c *inferCall) parseOutputs() error {
	return c.parseArray("Unable to parse 'outputs'", c.parseOutput)
}

func (c *inferCall) parseOutput() error {
	sc := &c.sc
	if sc.kind() != kindObject {
		if err := sc.skipValue(); err != nil {
			return err
		}
		return missingMember("Unable to parse 'name'", "name")
	}
	var f outputFields
	sc.enter()
	for first := true; ; first = false {
		key, ok, err := sc.objectKey(first)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		start := sc.pos
		var fieldErr *error
		switch string(key) {
		case "name":
			fieldErr = &f.nameErr
			f.hasName = true
			f.name, err = c.readStringField("Unable to parse 'name'")
		case "parameters":
			fieldErr = &f.paramsErr
			err = c.readOutputParams(&f)
		default:
			err = sc.skipValue()
		}
		if fieldErr == nil {
			if err != nil {
				return err // an unknown member's value is malformed JSON
			}
			continue
		}
		if err := c.settle(start, fieldErr, err); err != nil {
			return err
		}
	}
	if f.hasRegion {
		if f.hasClass {
			return invalidArg("Output can't set both 'shared_memory_region' and 'classification'")
		}
		if f.binaryErr != nil {
			return fieldError("Unable to set 'binary_data'", msgNotBool)
		}
		if f.binary {
			return invalidArg("Output can't set both 'shared_memory_region' and 'binary_data'")
		}
	}
	switch {
	case f.nameErr != nil:
		return f.nameErr
	case !f.hasName:
		return missingMember("Unable to parse 'name'", "name")
	case f.paramsErr != nil:
		return f.paramsErr
	case f.binaryErr != nil:
		return f.binaryErr
	}
	out := backendapi.RequestedOutput{Name: f.name, Classification: uint32(min(f.class, math.MaxUint32))}
	kind := outDefault
	switch {
	case f.hasRegion:
		kind = outSHM
		out.SharedMemory = &backendapi.SharedMemoryRef{Region: f.region, Offset: f.shmOffset, ByteSize: f.shmSize}
	case f.hasBinary && f.binary:
		kind = outBinary
	case f.hasBinary:
		kind = outJSON
	}
	if err := checkDuplicateOutput(c.req.Outputs, f.name); err != nil {
		return err
	}
	c.req.Outputs = append(c.req.Outputs, out)
	c.kinds = append(c.kinds, kind)
	return nil
}

func (c *inferCall) readOutputParams(f *outputFields) error {
	sc := &c.sc
	if sc.kind() != kindObject {
		return fieldError("Unable to parse 'parameters'", msgNotObject)
	}
	var firstErr error
	sc.enter()
	for first := true; ; first = false {
		key, ok, err := sc.objectKey(first)
		if err != nil {
			return err
		}
		if !ok {
			return firstErr
		}
		start := sc.pos
		switch string(key) {
		case "binary_data":
			f.hasBinary = true
			if sc.kind() != kindBool {
				f.binaryErr = fieldError("Unable to parse 'binary_data'", msgNotBool)
				err = sc.skipValue()
				break
			}
			f.binary, err = sc.readBool()
		case "classification":
			f.hasClass = true
			f.class, err = c.readUintField("Unable to set 'classification'")
		case "shared_memory_region":
			f.hasRegion = true
			f.region, err = c.readStringField("Unable to parse 'shared_memory_region'")
		case "shared_memory_offset":
			f.shmOffset, err = c.readUintField("Unable to parse 'shared_memory_offset'")
		case "shared_memory_byte_size":
			f.shmSize, err = c.readUintField("Unable to parse 'shared_memory_byte_size'")
		default:
			err = sc.skipValue()
		}
		if err := c.settle(start, &firstErr, err); err != nil {
			return err
		}
	}
}

// kindOf is how the response output name is sent back.
func (c *inferCall) kindOf(name string) outKind {
	for i := range c.req.Outputs {
		if c.req.Outputs[i].Name == name && c.kinds[i] != outDefault {
			return c.kinds[i]
		}
	}
	if c.defaultKind == outBinary {
		return outBinary
	}
	return outJSON
}

// buildRawRequest fills c.req for a raw binary request (header length 0):
// the whole body is the data of the model's single input, whose name,
// datatype and shape come from the model. Batching models get a batch of 1.
// Every output is returned binary.
func (c *inferCall) buildRawRequest(model string, meta *backendapi.ModelMetadata, maxBatchSize int32, data []byte) error {
	if len(meta.Inputs) != 1 {
		return invalidArg("Raw request must only have 1 input (found 1) to be deduced but got %d inputs in '%s' model configuration", len(meta.Inputs), model)
	}
	im := meta.Inputs[0]
	dims := im.Shape
	c.shapes = c.shapes[:0]
	if maxBatchSize > 0 && len(dims) > 0 {
		dims = dims[1:]
		c.shapes = append(c.shapes, 1)
	}
	in := backendapi.InputTensor{Name: im.Name, DataType: im.DataType}
	if im.DataType == backendapi.TypeBytes {
		// The body is one element, so the model must take exactly one.
		if len(dims) != 1 || dims[0] != 1 {
			return invalidArg("For BYTE datatype raw input '%s', the model must have input shape [1]", im.Name)
		}
		c.shapes = append(c.shapes, 1)
		c.arena = AppendBytesElement(c.arena[:0], data)
		in.Data = c.arena
	} else {
		size := int64(im.DataType.Size())
		if size == 0 {
			return invalidArg("raw binary request to model '%s': input '%s' has invalid datatype", model, im.Name)
		}
		variable, fixed := -1, int64(1)
		for i, d := range dims {
			if d < 0 {
				if variable >= 0 {
					return invalidArg("The shape of the raw input '%s' can not be deduced because there are more than one variable-sized dimension", im.Name)
				}
				variable = i
				continue
			}
			fixed *= d
		}
		base := len(c.shapes)
		c.shapes = append(c.shapes, dims...)
		if variable >= 0 {
			per := fixed * size
			if per == 0 || int64(len(data))%per != 0 {
				return invalidArg("raw binary request to model '%s': %d bytes do not fill whole elements of input '%s'", model, len(data), im.Name)
			}
			c.shapes[base+variable] = int64(len(data)) / per
		}
		in.Data = data
	}
	in.Shape = c.shapes
	c.req.Inputs = append(c.req.Inputs[:0], in)
	c.defaultKind = outBinary
	return nil
}
