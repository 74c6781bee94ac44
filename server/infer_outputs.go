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
	shmFields
}

func (c *inferCall) parseOutputs() error {
	return c.parseArray("Unable to parse 'outputs'", c.parseOutput)
}

func (c *inferCall) parseOutput() error {
	sc := &c.sc
	if sc.kind() != kindObject {
		return sc.skipWith(missingMember("Unable to parse 'name'", "name"))
	}
	var f outputFields
	err := sc.members(func(key []byte, at int) error {
		switch string(key) {
		case "name":
			f.hasName = true
			return sc.keep(&f.nameErr, at, c.readNameField(&f.name, "Unable to parse 'name'"))
		case "parameters":
			return sc.keep(&f.paramsErr, at, c.readOutputParams(&f))
		}
		return sc.skipValue()
	})
	if err != nil {
		return err
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
	if err := requiredMember(f.nameErr, f.hasName, "name"); err != nil {
		return err
	}
	switch {
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

// readOutputParams reads an output's "parameters": binary_data,
// classification and the shared memory keys; others are ignored.
func (c *inferCall) readOutputParams(f *outputFields) error {
	sc := &c.sc
	return c.readTensorParams(&f.shmFields, func(key []byte) (bool, error) {
		switch string(key) {
		case "binary_data":
			f.hasBinary = true
			if sc.kind() != kindBool {
				f.binaryErr = fieldError("Unable to parse 'binary_data'", msgNotBool)
				return true, sc.skipValue()
			}
			var err error
			f.binary, err = sc.readBool()
			return true, err
		case "classification":
			f.hasClass = true
			return true, c.readUintField(&f.class, "Unable to set 'classification'")
		}
		return false, nil
	})
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
