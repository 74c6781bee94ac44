package server

import (
	"math"

	"github.com/stubvisor/stubvisor/backendapi"
)

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

func (c *inferCall) parseInputs(model string, bin *[]byte, hdrGiven bool) error {
	return c.parseArray("Unable to parse 'inputs'", func() error { return c.parseInput(model, bin, hdrGiven) })
}

// shmFields collects the shared memory parameters of an input or output.
type shmFields struct {
	hasRegion          bool
	region             string
	shmOffset, shmSize uint64
}

// inputFields collects one input object's members before they are checked.
type inputFields struct {
	name, datatype                 string
	hasName, hasDatatype, hasShape bool
	nameErr, datatypeErr, shapeErr error
	paramsErr                      error
	hasData, hasBinary             bool
	binarySize                     uint64
	shmFields
	dataStart       int
	decoded         bool // data was decoded while scanning
	decodeErr       error
	dataAt, dataEnd int
	decodedCount    int64
	shapeAt         int
}

// parseInput reads one element of "inputs" and appends it to the request.
// The scanner ends after the element even when its content is wrong.
func (c *inferCall) parseInput(model string, bin *[]byte, hdrGiven bool) error {
	sc := &c.sc
	if sc.kind() != kindObject {
		return sc.skipWith(inputContentError(false, false, false))
	}
	f := inputFields{shapeAt: len(c.shapes)}
	err := sc.members(func(key []byte, at int) error {
		switch string(key) {
		case "name":
			f.hasName = true
			return sc.keep(&f.nameErr, at, c.readNameField(&f.name, "Unable to parse 'name'"))
		case "datatype":
			f.hasDatatype = true
			return sc.keep(&f.datatypeErr, at, c.readNameField(&f.datatype, "Unable to parse 'datatype'"))
		case "shape":
			f.hasShape = true
			c.shapes = c.shapes[:f.shapeAt]
			return sc.keep(&f.shapeErr, at, c.readShape())
		case "parameters":
			return sc.keep(&f.paramsErr, at, c.readInputParams(&f))
		case "data":
			f.hasData = true
			return c.readInputData(&f)
		}
		return sc.skipValue()
	})
	if err != nil {
		return err
	}
	return c.addInput(model, &f, bin, hdrGiven)
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
		var d uint64
		if err := c.readUintField(&d, "Unable to parse 'shape'"); err != nil {
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
	return c.readTensorParams(&f.shmFields, func(key []byte) (bool, error) {
		if string(key) != "binary_data_size" {
			return false, nil
		}
		f.hasBinary = true
		return true, c.readUintField(&f.binarySize, "Unable to parse 'binary_data_size'")
	})
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
	dt := parseWireDataType(f.datatype)
	if !f.hasDatatype || f.datatypeErr != nil || !decodable(dt) {
		return sc.skipValue()
	}
	hint := int64(-1)
	if f.hasShape && f.shapeErr == nil {
		hint = elementCount(c.shapes[f.shapeAt:])
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
	for _, err := range [...]error{
		requiredMember(f.nameErr, f.hasName, "name"),
		requiredMember(f.datatypeErr, f.hasDatatype, "datatype"),
		requiredMember(f.shapeErr, f.hasShape, "shape"),
	} {
		if err != nil {
			return err
		}
	}
	for i := range c.req.Inputs {
		if c.req.Inputs[i].Name == f.name {
			return invalidArg("input '%s' already exists in request", f.name)
		}
	}
	if f.paramsErr != nil {
		return f.paramsErr
	}
	dt := parseWireDataType(f.datatype)
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
		want := elementCount(shape)
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
