package server

import (
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
	// names are tensor names and datatypes seen by earlier requests,
	// kept across uses of the call (intern).
	names    []string
	nextName int
	// staged is the backend's memory the body's binary part was read
	// into (readDirect), released with the call.
	staged *backendapi.InputBuffer
}

// maxPooledBuffer caps the buffers a pooled call keeps, so that one huge
// request does not pin its memory until the pool's next two collections.
// It is above 4 MiB plus a header: a body of that size reused its buffer
// instead of zeroing a new one, 10% of the server's CPU per request.
const maxPooledBuffer = 16 << 20

var callPool = sync.Pool{New: func() any { return new(inferCall) }}

func getCall() *inferCall { return callPool.Get().(*inferCall) }

func putCall(c *inferCall) {
	c.staged.Release()
	c.staged = nil
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

// requiredMember is the error of a member an object must have: err, the one
// found reading it, or Triton's error for a missing member when it was
// absent (has is false).
func requiredMember(err error, has bool, name string) error {
	if err != nil || has {
		return err
	}
	return missingMember("Unable to parse '"+name+"'", name)
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
	err := sc.members(func(key []byte, at int) error {
		switch string(key) {
		case "id":
			if sc.kind() != kindString {
				return sc.keep(&idErr, at, fieldError("Unable to parse 'id'", msgNotString))
			}
			b, err := sc.readString()
			c.req.ID = string(b)
			return sc.keep(&idErr, at, err)
		case "parameters":
			return sc.keep(&paramsErr, at, c.parseRequestParams())
		case "inputs":
			sawInputs = true
			c.req.Inputs = c.req.Inputs[:0]
			c.slots = c.slots[:0]
			return sc.keep(&inputsErr, at, c.parseInputs(model, &bin, hdrGiven))
		case "outputs":
			c.req.Outputs = c.req.Outputs[:0]
			c.kinds = c.kinds[:0]
			return sc.keep(&outputsErr, at, c.parseOutputs())
		}
		return sc.skipValue()
	})
	if err != nil {
		return err
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
		return sc.skipWith(fieldError("failed to get request params.", "attempt to get members for non-object"))
	}
	var firstErr error
	err := sc.members(func(k []byte, _ int) error {
		key := string(k)
		v, err := sc.readParamValue()
		if err != nil || firstErr != nil {
			return err
		}
		if key == paramBinaryDataOutput {
			if b, ok := v.(bool); ok && b {
				c.defaultKind = outBinary
			} else {
				c.defaultKind = outDefault
			}
		}
		firstErr = applyRequestParameter(&c.req, key, v)
		return nil
	})
	if err != nil {
		return err
	}
	return firstErr
}

// parseArray reads a JSON array with each, one element at a time. After
// the first content error the other elements are only skipped, and that
// error is returned once the array is read; a syntax error ends at once.
func (c *inferCall) parseArray(context string, each func() error) error {
	sc := &c.sc
	if sc.kind() != kindArray {
		return sc.skipWith(fieldError(context, msgNotArray))
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

// readStringField reads a string into *dst.
func (c *inferCall) readStringField(dst *string, context string) error {
	if c.sc.kind() != kindString {
		return fieldError(context, msgNotString)
	}
	b, err := c.sc.readString()
	*dst = string(b)
	return err
}

// readNameField is readStringField for the strings that repeat from one
// request to the next (tensor names, datatypes): a string this pooled call
// read before is reused instead of allocated again.
func (c *inferCall) readNameField(dst *string, context string) error {
	if c.sc.kind() != kindString {
		return fieldError(context, msgNotString)
	}
	b, err := c.sc.readString()
	*dst = c.intern(b)
	return err
}

// maxNames bounds the strings a pooled call keeps for intern.
const maxNames = 16

// intern returns b as a string, one of c.names when it is there.
func (c *inferCall) intern(b []byte) string {
	for _, n := range c.names {
		if n == string(b) {
			return n
		}
	}
	n := string(b)
	if len(n) > 64 {
		return n
	}
	if len(c.names) < maxNames {
		c.names = append(c.names, n)
	} else {
		c.names[c.nextName] = n
		c.nextName = (c.nextName + 1) % maxNames
	}
	return n
}

// readUintField reads a non-negative integer into *dst.
func (c *inferCall) readUintField(dst *uint64, context string) error {
	if c.sc.kind() != kindNumber {
		return fieldError(context, msgNotUint)
	}
	n, err := c.sc.readNumber()
	if err != nil {
		return err
	}
	v, ok := n.uint64()
	if !ok {
		return fieldError(context, msgNotUint)
	}
	*dst = v
	return nil
}

// readTensorParams reads the "parameters" object of an input or output.
// own reads the keys only that side has and says whether key was one of
// them; the shared memory keys go to shm; the rest are ignored. The first
// content error is returned once the whole object is read.
func (c *inferCall) readTensorParams(shm *shmFields, own func(key []byte) (bool, error)) error {
	sc := &c.sc
	if sc.kind() != kindObject {
		return fieldError("Unable to parse 'parameters'", msgNotObject)
	}
	var firstErr error
	err := sc.members(func(key []byte, at int) error {
		ok, err := own(key)
		if !ok {
			ok, err = c.readSHMParam(shm, key)
		}
		if !ok {
			return sc.skipValue()
		}
		return sc.keep(&firstErr, at, err)
	})
	if err != nil {
		return err
	}
	return firstErr
}

// readSHMParam reads key into f when it is one of the shared memory
// parameters, and says whether it was.
func (c *inferCall) readSHMParam(f *shmFields, key []byte) (bool, error) {
	switch string(key) {
	case "shared_memory_region":
		f.hasRegion = true
		return true, c.readStringField(&f.region, "Unable to parse 'shared_memory_region'")
	case "shared_memory_offset":
		return true, c.readUintField(&f.shmOffset, "Unable to parse 'shared_memory_offset'")
	case "shared_memory_byte_size":
		return true, c.readUintField(&f.shmSize, "Unable to parse 'shared_memory_byte_size'")
	}
	return false, nil
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
		c.arena = appendBytesElement(c.arena[:0], data)
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
