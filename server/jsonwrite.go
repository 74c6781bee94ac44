package server

import (
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// This file holds the JSON writers of the hot path. They append to a caller's
// buffer so that a whole response is built in one pooled slice without
// reflection.

const hexDigits = "0123456789abcdef"

// safeASCII marks the bytes a JSON string may carry unescaped.
var safeASCII = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// appendJSONString appends s as a JSON string. Invalid UTF-8 is replaced by
// U+FFFD, as encoding/json does, so the output is always valid JSON.
func appendJSONString[T string | []byte](dst []byte, s T) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if safeASCII[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		end := min(i+utf8.UTFMax, len(s))
		r, size := utf8.DecodeRuneInString(string(s[i:end]))
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendJSONFloat appends f with the fewest digits that read back as the
// same value at the given bit size. NaN and infinities, which JSON lacks, are
// written as Python's json module writes and reads them.
func appendJSONFloat(dst []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, "NaN"...)
	case math.IsInf(f, 1):
		return append(dst, "Infinity"...)
	case math.IsInf(f, -1):
		return append(dst, "-Infinity"...)
	}
	if out, ok := appendSmallInt(dst, f); ok {
		return out
	}
	return strconv.AppendFloat(dst, f, 'g', -1, bits)
}

// appendJSONKey appends the key of an object member and its colon, after a
// comma unless the member is the object's first.
func appendJSONKey(dst []byte, first bool, key string) []byte {
	if !first {
		dst = append(dst, ',')
	}
	dst = appendJSONString(dst, key)
	return append(dst, ':')
}

// appendJSONValue appends a parameter value (bool, integer, float or
// string) or a setting's list of strings. Anything else is written as its string form so that a response never
// fails because a model set an odd parameter.
func appendJSONValue(dst []byte, v any) []byte {
	switch x := v.(type) {
	case bool:
		return strconv.AppendBool(dst, x)
	case int:
		return strconv.AppendInt(dst, int64(x), 10)
	case int32:
		return strconv.AppendInt(dst, int64(x), 10)
	case int64:
		return strconv.AppendInt(dst, x, 10)
	case uint32:
		return strconv.AppendUint(dst, uint64(x), 10)
	case uint64:
		return strconv.AppendUint(dst, x, 10)
	case uint:
		return strconv.AppendUint(dst, uint64(x), 10)
	case float32:
		return appendJSONFloat(dst, float64(x), 32)
	case float64:
		return appendJSONFloat(dst, x, 64)
	case string:
		return appendJSONString(dst, x)
	case []byte:
		return appendJSONString(dst, x)
	case []string:
		dst = append(dst, '[')
		for i, s := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, s)
		}
		return append(dst, ']')
	case nil:
		return append(dst, "null"...)
	default:
		return appendJSONString(dst, fmt.Sprint(x))
	}
}
