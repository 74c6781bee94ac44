package server

import (
	"math"

	"github.com/stubvisor/stubvisor/backendapi"
)

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
