package ipc

import (
	"bytes"
	"fmt"
	"math"
)

// reader consumes msgpack from a byte slice. Every method checks lengths
// against what is left, so it never panics and never allocates more than
// the input could describe.
type reader struct{ b []byte }

func (r *reader) byte() (byte, error) {
	if len(r.b) == 0 {
		return 0, errShort
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c, nil
}

func (r *reader) take(n uint64) ([]byte, error) {
	if n > uint64(len(r.b)) {
		return nil, errShort
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v, nil
}

func (r *reader) be(n uint64) (uint64, error) {
	v, err := r.take(n)
	if err != nil {
		return 0, err
	}
	var x uint64
	for _, c := range v {
		x = x<<8 | uint64(c)
	}
	return x, nil
}

// container reads an array (map false) or map header, checking that the
// claimed elements can exist in the bytes left (each takes at least one).
func (r *reader) container(isMap bool) (int, error) {
	c, err := r.byte()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case !isMap && c&0xf0 == 0x90:
		n = uint64(c & 0x0f)
	case isMap && c&0xf0 == 0x80:
		n = uint64(c & 0x0f)
	case !isMap && c == 0xdc, isMap && c == 0xde:
		n, err = r.be(2)
	case !isMap && c == 0xdd, isMap && c == 0xdf:
		n, err = r.be(4)
	default:
		return 0, fmt.Errorf("%w: code %#x for %s", errType, c, map[bool]string{false: "array", true: "map"}[isMap])
	}
	if err != nil {
		return 0, err
	}
	per := uint64(1)
	if isMap {
		per = 2
	}
	if n > uint64(len(r.b))/per {
		return 0, fmt.Errorf("%w: %d elements in %d bytes", errShort, n, len(r.b))
	}
	return int(n), nil
}

func (r *reader) arrayLen() (int, error) { return r.container(false) }

func (r *reader) mapLen() (int, error) { return r.container(true) }

// nil consumes a nil and reports whether there was one.
func (r *reader) nil() bool {
	if len(r.b) > 0 && r.b[0] == 0xc0 {
		r.b = r.b[1:]
		return true
	}
	return false
}

// integer reads any msgpack integer as a sign and a magnitude.
func (r *reader) integer() (neg bool, v uint64, err error) {
	c, err := r.byte()
	if err != nil {
		return false, 0, err
	}
	switch {
	case c <= 0x7f:
		return false, uint64(c), nil
	case c >= 0xe0:
		return true, uint64(-int64(int8(c))), nil
	case c >= 0xcc && c <= 0xcf:
		v, err = r.be(1 << (c - 0xcc))
		return false, v, err
	case c >= 0xd0 && c <= 0xd3:
		n := uint64(1) << (c - 0xd0)
		v, err = r.be(n)
		if err != nil {
			return false, 0, err
		}
		shift := 64 - 8*n
		s := int64(v<<shift) >> shift // sign-extend
		if s < 0 {
			return true, uint64(-s), nil // -MinInt64 wraps to 1<<63, still right as a magnitude
		}
		return false, uint64(s), nil
	}
	return false, 0, fmt.Errorf("%w: code %#x for an integer", errType, c)
}

func (r *reader) uint(limit uint64) (uint64, error) {
	neg, v, err := r.integer()
	if err != nil {
		return 0, err
	}
	if (neg && v != 0) || v > limit {
		return 0, errRange
	}
	return v, nil
}

func (r *reader) int() (int64, error) {
	neg, v, err := r.integer()
	if err != nil {
		return 0, err
	}
	if neg {
		if v > 1<<63 {
			return 0, errRange
		}
		return -int64(v), nil
	}
	if v > math.MaxInt64 {
		return 0, errRange
	}
	return int64(v), nil
}

func (r *reader) bool() (bool, error) {
	c, err := r.byte()
	switch {
	case err != nil:
		return false, err
	case c == 0xc2:
		return false, nil
	case c == 0xc3:
		return true, nil
	}
	return false, fmt.Errorf("%w: code %#x for a bool", errType, c)
}

// rawStr reads a str or bin (a peer may send either for text), or nil as
// empty.
func (r *reader) rawStr() ([]byte, error) {
	c, err := r.byte()
	if err != nil {
		return nil, err
	}
	var n uint64
	switch {
	case c&0xe0 == 0xa0:
		n = uint64(c & 0x1f)
	case c == 0xd9 || c == 0xc4:
		n, err = r.be(1)
	case c == 0xda || c == 0xc5:
		n, err = r.be(2)
	case c == 0xdb || c == 0xc6:
		n, err = r.be(4)
	case c == 0xc0:
		return nil, nil
	default:
		return nil, fmt.Errorf("%w: code %#x for a string", errType, c)
	}
	if err != nil {
		return nil, err
	}
	return r.take(n)
}

func (r *reader) str() (string, error) {
	b, err := r.rawStr()
	return string(b), err
}

func (r *reader) stringMap() (map[string]string, error) {
	if r.nil() {
		return nil, nil
	}
	n, err := r.mapLen()
	if err != nil {
		return nil, err
	}
	m := make(map[string]string, n)
	for range n {
		k, err := r.str()
		if err != nil {
			return nil, err
		}
		if m[k], err = r.str(); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (r *reader) anyMap() (map[string]any, error) {
	if r.nil() {
		return nil, nil
	}
	v, err := r.anyValue(0)
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: %T for a map", errType, v)
	}
	return m, nil
}

// anyValue decodes a free-form value: nil, bool, int64 (uint64 above
// MaxInt64), float64, string, []byte, []any or map[string]any (keys must
// be strings).
func (r *reader) anyValue(depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("%w: nested deeper than %d", errRange, maxDepth)
	}
	if len(r.b) == 0 {
		return nil, errShort
	}
	c := r.b[0]
	switch {
	case c == 0xc0:
		r.b = r.b[1:]
		return nil, nil
	case c == 0xc2 || c == 0xc3:
		return r.bool()
	case c <= 0x7f || c >= 0xe0 || (c >= 0xcc && c <= 0xd3):
		neg, v, err := r.integer()
		if err != nil {
			return nil, err
		}
		if neg {
			return -int64(v), nil // 1<<63 wraps to MinInt64 exactly
		}
		if v > math.MaxInt64 {
			return v, nil
		}
		return int64(v), nil
	case c == 0xca:
		r.b = r.b[1:]
		v, err := r.be(4)
		return float64(math.Float32frombits(uint32(v))), err
	case c == 0xcb:
		r.b = r.b[1:]
		v, err := r.be(8)
		return math.Float64frombits(v), err
	case c&0xe0 == 0xa0 || (c >= 0xd9 && c <= 0xdb):
		return r.str()
	case c >= 0xc4 && c <= 0xc6:
		b, err := r.rawStr()
		return bytes.Clone(b), err
	case c&0xf0 == 0x90 || c == 0xdc || c == 0xdd:
		n, err := r.arrayLen()
		if err != nil {
			return nil, err
		}
		s := make([]any, n)
		for i := range s {
			if s[i], err = r.anyValue(depth + 1); err != nil {
				return nil, err
			}
		}
		return s, nil
	case c&0xf0 == 0x80 || c == 0xde || c == 0xdf:
		n, err := r.mapLen()
		if err != nil {
			return nil, err
		}
		m := make(map[string]any, n)
		for range n {
			k, err := r.str()
			if err != nil {
				return nil, err
			}
			if m[k], err = r.anyValue(depth + 1); err != nil {
				return nil, err
			}
		}
		return m, nil
	}
	return nil, fmt.Errorf("%w: code %#x in a value", errType, c)
}

// skip consumes n whole values (the trailing elements a newer peer may
// add), iteratively so that nesting cannot exhaust the stack.
func (r *reader) skip(n int) error {
	for pending := uint64(n); pending > 0; pending-- {
		c, err := r.byte()
		if err != nil {
			return err
		}
		var size uint64
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		case c&0xf0 == 0x80:
			pending += 2 * uint64(c&0x0f)
		case c&0xf0 == 0x90:
			pending += uint64(c & 0x0f)
		case c&0xe0 == 0xa0:
			size = uint64(c & 0x1f)
		case c == 0xc4 || c == 0xd9:
			size, err = r.be(1)
		case c == 0xc5 || c == 0xda:
			size, err = r.be(2)
		case c == 0xc6 || c == 0xdb:
			size, err = r.be(4)
		case c == 0xc7, c == 0xc8, c == 0xc9:
			size, err = r.be(1 << (c - 0xc7))
			size++ // the ext type byte
		case c == 0xca:
			size = 4
		case c == 0xcb:
			size = 8
		case c >= 0xcc && c <= 0xcf:
			size = 1 << (c - 0xcc)
		case c >= 0xd0 && c <= 0xd3:
			size = 1 << (c - 0xd0)
		case c >= 0xd4 && c <= 0xd8:
			size = 1 + 1<<(c-0xd4)
		case c == 0xdc || c == 0xdd || c == 0xde || c == 0xdf:
			var k uint64
			k, err = r.be(2 << ((c - 0xdc) & 1)) // 16- or 32-bit count
			if c >= 0xde {
				k *= 2 // a map entry is two values
			}
			pending += k
		default:
			return fmt.Errorf("%w: code %#x", errType, c)
		}
		if err != nil {
			return err
		}
		if pending > uint64(len(r.b))+1 {
			return fmt.Errorf("%w: %d values in %d bytes", errShort, pending-1, len(r.b))
		}
		if _, err := r.take(size); err != nil {
			return err
		}
	}
	return nil
}
