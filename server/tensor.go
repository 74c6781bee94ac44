package server

import (
	"encoding/binary"
	"math"
	"strconv"
	"strings"

	"github.com/stubvisor/stubvisor/backendapi"
)

// This file converts tensors between their wire forms: the datatype names of
// the KServe protocol, the JSON `data` arrays of the HTTP API, and the
// binary tensor form every backend speaks (little-endian, row-major, BOOL one
// byte, BYTES elements as a 4-byte little-endian length and the raw bytes).

// parseWireDataType parses a KServe v2 datatype name ("FP32", "BYTES").
// Model-config spellings ("TYPE_FP32") are not wire names and give
// TypeInvalid, as does anything else unknown.
func parseWireDataType(s string) backendapi.DataType {
	if strings.HasPrefix(s, "TYPE_") {
		return backendapi.TypeInvalid
	}
	return backendapi.ParseDataType(s)
}

// elementCount is the number of elements of a tensor of the given shape, or
// -1 when a dimension is negative or the count does not fit in an int64.
func elementCount(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return -1
		}
		if d != 0 && n > math.MaxInt64/d {
			return -1
		}
		n *= d
	}
	return n
}

// appendBytesElement appends one BYTES element in binary tensor form.
func appendBytesElement(dst, elem []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(elem)))
	return append(dst, elem...)
}

// nextBytesElement splits the first BYTES element off a binary BYTES tensor.
// ok is false when data is too short for the length prefix or the element.
func nextBytesElement(data []byte) (elem, rest []byte, ok bool) {
	if len(data) < 4 {
		return nil, data, false
	}
	n := binary.LittleEndian.Uint32(data)
	if uint64(n) > uint64(len(data)-4) {
		return nil, data, false
	}
	return data[4 : 4+n], data[4+n:], true
}

// decodeJSONData appends the binary form of the JSON `data` value at the
// scanner's position (an array, nested to any depth, flattened in row-major
// order) to dst, and returns the number of elements decoded. hint is the
// element count the shape promises (or -1); it only sizes the output. The
// caller has already refused FP16, BF16 and invalid types.
func decodeJSONData(dst []byte, sc *jsonScanner, dt backendapi.DataType, hint int64) ([]byte, int64, error) {
	if sc.kind() != kindArray {
		return dst, 0, fieldError("Unable to parse 'data'", msgNotArray)
	}
	if size := int64(dt.Size()); size > 0 && hint > 0 {
		// Every element takes at least two bytes of JSON ("1,"), which
		// bounds the output without trusting the shape.
		want := min(hint, int64(len(sc.buf)-sc.pos)/2+1) * size
		if int64(cap(dst)-len(dst)) < want {
			grown := make([]byte, len(dst), int64(len(dst))+want)
			copy(grown, dst)
			dst = grown
		}
	}
	var count int64
	dst, err := decodeJSONArray(dst, sc, dt, 0, &count)
	return dst, count, err
}

func decodeJSONArray(dst []byte, sc *jsonScanner, dt backendapi.DataType, depth int, count *int64) ([]byte, error) {
	sc.enter()
	for first := true; ; first = false {
		more, err := sc.arrayNext(first)
		if err != nil || !more {
			return dst, err
		}
		if depth+1 >= maxDataDepth {
			return dst, invalidArg("JSON nesting depth exceeds maximum allowed limit (%d)", maxDataDepth)
		}
		if sc.kind() == kindArray {
			if dst, err = decodeJSONArray(dst, sc, dt, depth+1, count); err != nil {
				return dst, err
			}
			continue
		}
		if dst, err = decodeJSONElement(dst, sc, dt); err != nil {
			return dst, err
		}
		*count++
	}
}

// decodeJSONElement appends one scalar element. Its type errors carry the
// texts of Triton's JSON accessors.
func decodeJSONElement(dst []byte, sc *jsonScanner, dt backendapi.DataType) ([]byte, error) {
	k := sc.kind()
	if k == kindInvalid {
		return dst, sc.syntaxError(errValueInvalid)
	}
	switch dt {
	case backendapi.TypeBool:
		if k != kindBool {
			return dst, fieldError("Unable to parse 'data'", msgNotBool)
		}
		b, err := sc.readBool()
		if err != nil {
			return dst, err
		}
		if b {
			return append(dst, 1), nil
		}
		return append(dst, 0), nil
	case backendapi.TypeBytes:
		if k != kindString {
			return dst, fieldError("Unable to parse JSON bytes array", msgNotString)
		}
		at := len(dst)
		dst = append(dst, 0, 0, 0, 0)
		dst, err := sc.appendString(dst)
		if err != nil {
			return dst, err
		}
		n := len(dst) - at - 4
		if uint64(n) > math.MaxUint32 {
			return dst, fieldError("Unable to parse JSON bytes array", "element longer than 4 GiB")
		}
		binary.LittleEndian.PutUint32(dst[at:], uint32(n))
		return dst, nil
	}
	if k != kindNumber {
		switch dt {
		case backendapi.TypeFP32, backendapi.TypeFP64:
			return dst, fieldError("Unable to parse 'data'", msgNotNumber)
		case backendapi.TypeInt8, backendapi.TypeInt16, backendapi.TypeInt32, backendapi.TypeInt64:
			return dst, fieldError("Unable to parse 'data'", msgNotInt)
		}
		return dst, fieldError("Unable to parse 'data'", msgNotUint)
	}
	n, err := sc.readNumber()
	if err != nil {
		return dst, err
	}
	switch dt {
	case backendapi.TypeFP32:
		return binary.LittleEndian.AppendUint32(dst, math.Float32bits(float32(n.float(32)))), nil
	case backendapi.TypeFP64:
		return binary.LittleEndian.AppendUint64(dst, math.Float64bits(n.float(64))), nil
	case backendapi.TypeUint8, backendapi.TypeUint16, backendapi.TypeUint32, backendapi.TypeUint64:
		v, ok := n.uint64()
		if !ok {
			return dst, fieldError("Unable to parse 'data'", msgNotUint)
		}
		if bits := uint(dt.Size() * 8); bits < 64 && v>>bits != 0 {
			return dst, outOfRange(n, dt)
		}
		return appendLE(dst, dt.Size(), v), nil
	default: // signed integers
		v, ok := n.int64()
		if !ok {
			return dst, fieldError("Unable to parse 'data'", msgNotInt)
		}
		if bits := uint(dt.Size() * 8); bits < 64 && (v < -1<<(bits-1) || v >= 1<<(bits-1)) {
			return dst, outOfRange(n, dt)
		}
		return appendLE(dst, dt.Size(), uint64(v)), nil
	}
}

// appendLE appends the low size bytes of v, little-endian: one integer
// element of a tensor whose elements are size bytes long.
func appendLE(dst []byte, size int, v uint64) []byte {
	switch size {
	case 1:
		return append(dst, byte(v))
	case 2:
		return binary.LittleEndian.AppendUint16(dst, uint16(v))
	case 4:
		return binary.LittleEndian.AppendUint32(dst, uint32(v))
	}
	return binary.LittleEndian.AppendUint64(dst, v)
}

func outOfRange(n jsonNumber, dt backendapi.DataType) error {
	return invalidArg("Unable to parse 'data': value %s is out of range for %s", n.raw, dt)
}

// outputSizeError is Triton's text for an output whose bytes do not match
// its shape.
func outputSizeError(name string) error {
	return backendapi.Errorf(backendapi.Internal, "output tensor shape does not match size of output for '%s'", name)
}

// appendJSONData appends the JSON array form of a binary tensor of count
// elements (flat, as Triton writes it).
func appendJSONData(dst []byte, name string, dt backendapi.DataType, data []byte, count int64) ([]byte, error) {
	switch dt {
	case backendapi.TypeFP16, backendapi.TypeBF16:
		return dst, invalidArg("sending %s data via JSON is not supported. Please use the binary data format for output", dt)
	case backendapi.TypeBytes:
		if count < 0 {
			return dst, outputSizeError(name)
		}
		dst = append(dst, '[')
		rest := data
		for i := int64(0); i < count; i++ {
			elem, next, ok := nextBytesElement(rest)
			if !ok {
				return dst, outputSizeError(name)
			}
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, elem)
			rest = next
		}
		return append(dst, ']'), nil
	}
	size := dt.Size()
	if size == 0 {
		return dst, invalidArg("Invalid data type for output tensor")
	}
	if count < 0 || int64(len(data)) != count*int64(size) {
		return dst, outputSizeError(name)
	}
	dst = append(dst, '[')
	for i := 0; i < len(data); i += size {
		if i > 0 {
			dst = append(dst, ',')
		}
		e := data[i : i+size]
		switch dt {
		case backendapi.TypeBool:
			dst = strconv.AppendBool(dst, e[0] != 0)
		case backendapi.TypeUint8:
			dst = strconv.AppendUint(dst, uint64(e[0]), 10)
		case backendapi.TypeUint16:
			dst = strconv.AppendUint(dst, uint64(binary.LittleEndian.Uint16(e)), 10)
		case backendapi.TypeUint32:
			dst = strconv.AppendUint(dst, uint64(binary.LittleEndian.Uint32(e)), 10)
		case backendapi.TypeUint64:
			dst = strconv.AppendUint(dst, binary.LittleEndian.Uint64(e), 10)
		case backendapi.TypeInt8:
			dst = strconv.AppendInt(dst, int64(int8(e[0])), 10)
		case backendapi.TypeInt16:
			dst = strconv.AppendInt(dst, int64(int16(binary.LittleEndian.Uint16(e))), 10)
		case backendapi.TypeInt32:
			dst = strconv.AppendInt(dst, int64(int32(binary.LittleEndian.Uint32(e))), 10)
		case backendapi.TypeInt64:
			dst = strconv.AppendInt(dst, int64(binary.LittleEndian.Uint64(e)), 10)
		case backendapi.TypeFP32:
			dst = appendJSONFloat(dst, float64(math.Float32frombits(binary.LittleEndian.Uint32(e))), 32)
		case backendapi.TypeFP64:
			dst = appendJSONFloat(dst, math.Float64frombits(binary.LittleEndian.Uint64(e)), 64)
		}
	}
	return append(dst, ']'), nil
}

// checkJSONInputSize refuses, in Triton's words, a JSON input whose shape
// has more elements than an int64 counts (want is elementCount(shape)) or
// whose byte size would not fit in one.
func checkJSONInputSize(name string, shape []int64, want int64, dt backendapi.DataType) error {
	if want < 0 {
		return invalidArg("invalid shape for input '%s': shape %s causes total element count to exceed maximum size of %d", name, shapeString(shape), int64(math.MaxInt64))
	}
	if size := int64(dt.Size()); size > 1 && want > math.MaxInt64/size {
		return invalidArg("byte size overflow for input '%s': element count (%d) * data type size (%d) exceeds maximum allowed size (%d)", name, want, size, int64(math.MaxInt64))
	}
	return nil
}

// shapeString is Triton's ShapeToString: "[d0,d1,...]".
func shapeString(shape []int64) string {
	b := []byte{'['}
	for i, d := range shape {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, d, 10)
	}
	return string(append(b, ']'))
}

// checkDuplicateOutput refuses a requested output named twice, as Triton's
// core does.
func checkDuplicateOutput(outs []backendapi.RequestedOutput, name string) error {
	for i := range outs {
		if outs[i].Name == name {
			return invalidArg("output '%s' already exists in request", name)
		}
	}
	return nil
}
