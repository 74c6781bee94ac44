package server

import (
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// jsonScanner is a minimal pull parser over one JSON document held in
// memory. The infer path uses it instead of encoding/json so that tensor
// data goes from the request body straight into little-endian bytes, with no
// reflection and no intermediate []any. Its syntax errors carry the texts of
// rapidjson, the parser Triton uses, so clients see familiar messages.
type jsonScanner struct {
	buf []byte
	pos int
	// tmp holds the unescaped form of the last string that had escapes.
	tmp []byte
}

// maxDataDepth is Triton's bound on the nesting of an input's "data"
// (HTTP_MAX_JSON_NESTING_DEPTH); real requests nest as deep as their rank.
const maxDataDepth = 100

// Texts of rapidjson's GetParseError_En.
const (
	errDocEmpty       = "The document is empty."
	errRootNotSingle  = "The document root must not be followed by other values."
	errValueInvalid   = "Invalid value."
	errObjMissName    = "Missing a name for object member."
	errObjMissColon   = "Missing a colon after a name of object member."
	errObjMissComma   = "Missing a comma or '}' after an object member."
	errArrMissComma   = "Missing a comma or ']' after an array element."
	errStrBadHex      = "Incorrect hex digit after \\u escape in string."
	errStrBadSurr     = "The surrogate pair in string is invalid."
	errStrBadEscape   = "Invalid escape character in string."
	errStrMissQuote   = "Missing a closing quotation mark in string."
	errStrBadEncoding = "Invalid encoding in string."
	errNumMissFrac    = "Miss fraction part in number."
	errNumMissExp     = "Miss exponent in number."
)

// jsonKind is the type of the value at the scanner's position.
type jsonKind uint8

const (
	kindInvalid jsonKind = iota
	kindObject
	kindArray
	kindString
	kindNumber
	kindBool
	kindNull
)

func (s *jsonScanner) reset(buf []byte) {
	s.buf = buf
	s.pos = 0
}

// jsonSyntaxError is a malformed document, as opposed to a well-formed one
// with wrong content; parsers use the distinction to report the first
// problem in the order Triton checks them (syntax before content).
type jsonSyntaxError struct{ err error }

func (e *jsonSyntaxError) Error() string { return e.err.Error() }
func (e *jsonSyntaxError) Unwrap() error { return e.err }

func isSyntaxError(err error) bool {
	_, ok := err.(*jsonSyntaxError)
	return ok
}

func (s *jsonScanner) syntaxError(msg string) error {
	return &jsonSyntaxError{invalidArg("failed to parse the request JSON buffer: %s at %d", msg, s.pos)}
}

func (s *jsonScanner) skipWS() {
	for s.pos < len(s.buf) {
		switch s.buf[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// kind skips white space and classifies the value that starts there.
func (s *jsonScanner) kind() jsonKind {
	s.skipWS()
	if s.pos >= len(s.buf) {
		return kindInvalid
	}
	switch c := s.buf[s.pos]; {
	case c == '{':
		return kindObject
	case c == '[':
		return kindArray
	case c == '"':
		return kindString
	case c == '-' || (c >= '0' && c <= '9'):
		return kindNumber
	case c == 't' || c == 'f':
		return kindBool
	case c == 'n':
		return kindNull
	}
	return kindInvalid
}

// begin checks that the document is not empty; end that nothing but white
// space follows the root value.
func (s *jsonScanner) begin() error {
	s.skipWS()
	if s.pos >= len(s.buf) {
		return s.syntaxError(errDocEmpty)
	}
	return nil
}

func (s *jsonScanner) end() error {
	s.skipWS()
	if s.pos < len(s.buf) {
		return s.syntaxError(errRootNotSingle)
	}
	return nil
}

// enter consumes the opening '{' or '[' at the position.
func (s *jsonScanner) enter() { s.pos++ }

// objectKey advances to the next member of an object whose '{' has been
// consumed. It returns ok=false after consuming the closing '}'. The key is
// valid until the next call on s.
func (s *jsonScanner) objectKey(first bool) (key []byte, ok bool, err error) {
	s.skipWS()
	if s.pos >= len(s.buf) {
		if first {
			return nil, false, s.syntaxError(errObjMissName)
		}
		return nil, false, s.syntaxError(errObjMissComma)
	}
	if !first {
		switch s.buf[s.pos] {
		case '}':
			s.pos++
			return nil, false, nil
		case ',':
			s.pos++
			s.skipWS()
		default:
			return nil, false, s.syntaxError(errObjMissComma)
		}
	} else if s.buf[s.pos] == '}' {
		s.pos++
		return nil, false, nil
	}
	if s.pos >= len(s.buf) || s.buf[s.pos] != '"' {
		return nil, false, s.syntaxError(errObjMissName)
	}
	key, err = s.readString()
	if err != nil {
		return nil, false, err
	}
	s.skipWS()
	if s.pos >= len(s.buf) || s.buf[s.pos] != ':' {
		return nil, false, s.syntaxError(errObjMissColon)
	}
	s.pos++
	s.skipWS()
	return key, true, nil
}

// arrayNext advances to the next element of an array whose '[' has been
// consumed. It returns false after consuming the closing ']'.
func (s *jsonScanner) arrayNext(first bool) (bool, error) {
	s.skipWS()
	if s.pos >= len(s.buf) {
		if first {
			return false, s.syntaxError(errValueInvalid)
		}
		return false, s.syntaxError(errArrMissComma)
	}
	c := s.buf[s.pos]
	if c == ']' {
		s.pos++
		return false, nil
	}
	if !first {
		if c != ',' {
			return false, s.syntaxError(errArrMissComma)
		}
		s.pos++
		s.skipWS()
	}
	return true, nil
}

// readString reads the string at the position (which must be '"'). The
// result aliases the document when the string has no escapes, and s.tmp
// otherwise; either way it is valid until the next readString.
func (s *jsonScanner) readString() ([]byte, error) {
	start := s.pos + 1
	for i := start; i < len(s.buf); i++ {
		switch c := s.buf[i]; {
		case c == '"':
			s.pos = i + 1
			return s.buf[start:i], nil
		case c == '\\':
			var err error
			s.tmp, err = s.appendString(s.tmp[:0])
			return s.tmp, err
		case c < 0x20:
			s.pos = i
			return nil, s.syntaxError(errStrBadEncoding)
		}
	}
	s.pos = len(s.buf)
	return nil, s.syntaxError(errStrMissQuote)
}

// appendString appends the unescaped content of the string at the position
// (which must be '"') to dst.
func (s *jsonScanner) appendString(dst []byte) ([]byte, error) {
	i := s.pos + 1
	start := i
	for i < len(s.buf) {
		c := s.buf[i]
		switch {
		case c == '"':
			s.pos = i + 1
			return append(dst, s.buf[start:i]...), nil
		case c < 0x20:
			s.pos = i
			return dst, s.syntaxError(errStrBadEncoding)
		case c != '\\':
			i++
			continue
		}
		dst = append(dst, s.buf[start:i]...)
		if i+1 >= len(s.buf) {
			s.pos = len(s.buf)
			return dst, s.syntaxError(errStrMissQuote)
		}
		e := s.buf[i+1]
		i += 2
		switch e {
		case '"', '\\', '/':
			dst = append(dst, e)
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(s.buf, i)
			if !ok {
				s.pos = i
				return dst, s.syntaxError(errStrBadHex)
			}
			i += 4
			if utf16.IsSurrogate(r) {
				if r >= 0xDC00 || i+6 > len(s.buf) || s.buf[i] != '\\' || s.buf[i+1] != 'u' {
					s.pos = i
					return dst, s.syntaxError(errStrBadSurr)
				}
				r2, ok := hex4(s.buf, i+2)
				if !ok {
					s.pos = i + 2
					return dst, s.syntaxError(errStrBadHex)
				}
				r = utf16.DecodeRune(r, r2)
				if r == utf8.RuneError {
					s.pos = i
					return dst, s.syntaxError(errStrBadSurr)
				}
				i += 6
			}
			dst = utf8.AppendRune(dst, r)
		default:
			s.pos = i - 2 // rapidjson reports the backslash
			return dst, s.syntaxError(errStrBadEscape)
		}
		start = i
	}
	s.pos = len(s.buf)
	return dst, s.syntaxError(errStrMissQuote)
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// jsonNumber is a number token: its text and whether it is an integer
// (no fraction or exponent) and negative.
type jsonNumber struct {
	raw   []byte
	isInt bool
	neg   bool
}

// skipDigits returns the index of the first byte at or after i in b that is
// not a decimal digit.
func skipDigits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// readNumber reads the number at the position with JSON's grammar.
func (s *jsonScanner) readNumber() (jsonNumber, error) {
	b := s.buf
	i := s.pos
	n := jsonNumber{isInt: true}
	if i < len(b) && b[i] == '-' {
		n.neg = true
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = skipDigits(b, i+1)
	default:
		s.pos = i
		return n, s.syntaxError(errValueInvalid)
	}
	if i < len(b) && b[i] == '.' {
		n.isInt = false
		d := i + 1
		if i = skipDigits(b, d); i == d {
			s.pos = i
			return n, s.syntaxError(errNumMissFrac)
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		n.isInt = false
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		if i = skipDigits(b, d); i == d {
			s.pos = i
			return n, s.syntaxError(errNumMissExp)
		}
	}
	n.raw = b[s.pos:i]
	s.pos = i
	return n, nil
}

// uint64 returns the number as a uint64 when it is a non-negative integer
// that fits.
func (n jsonNumber) uint64() (uint64, bool) {
	if !n.isInt || n.neg {
		return 0, false
	}
	var v uint64
	for _, c := range n.raw {
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// int64 returns the number as an int64 when it is an integer that fits.
func (n jsonNumber) int64() (int64, bool) {
	if !n.isInt {
		return 0, false
	}
	digits := n.raw
	if n.neg {
		digits = digits[1:]
	}
	var v uint64
	for _, c := range digits {
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	if n.neg {
		if v > 1<<63 {
			return 0, false
		}
		return -int64(v), true
	}
	if v > 1<<63-1 {
		return 0, false
	}
	return int64(v), true
}

// float returns the number rounded to the given bit size. Values beyond the
// type's range become infinities, as a C cast of the double would make them.
func (n jsonNumber) float(bits int) float64 {
	if n.isInt && len(n.raw) <= 16 {
		// Integers below 2^53 are exact in a float64, and a float64 to
		// float32 conversion rounds correctly.
		if v, ok := n.int64(); ok && v > -1<<53 && v < 1<<53 {
			if bits == 32 {
				return float64(float32(v))
			}
			return float64(v)
		}
	}
	if f, ok := exactDecimal(n.raw, bits); ok {
		return f
	}
	// strconv keeps no reference to the string (its errors clone it), so
	// the zero-copy view of the token is safe.
	f, _ := strconv.ParseFloat(unsafe.String(unsafe.SliceData(n.raw), len(n.raw)), bits)
	return f
}

// readBool reads true or false.
func (s *jsonScanner) readBool() (bool, error) {
	b := s.buf[s.pos:]
	if len(b) >= 4 && string(b[:4]) == "true" {
		s.pos += 4
		return true, nil
	}
	if len(b) >= 5 && string(b[:5]) == "false" {
		s.pos += 5
		return false, nil
	}
	return false, s.syntaxError(errValueInvalid)
}

// readNull reads null.
func (s *jsonScanner) readNull() error {
	b := s.buf[s.pos:]
	if len(b) >= 4 && string(b[:4]) == "null" {
		s.pos += 4
		return nil
	}
	return s.syntaxError(errValueInvalid)
}

// skipValue validates and skips the value at the position. It keeps its
// own stack of open containers instead of recursing, so any nesting a body
// within the size limit can hold is walked without growing the goroutine
// stack (Triton parses such bodies too and then rejects them by content).
func (s *jsonScanner) skipValue() error {
	var open []bool // true: an object, false: an array
	first := false
	for {
		switch s.kind() {
		case kindObject, kindArray:
			open = append(open, s.kind() == kindObject)
			s.enter()
			first = true
		default:
			if err := s.skipScalar(); err != nil {
				return err
			}
			first = false
		}
		// Move to the next value of the innermost open container, closing
		// the containers that have ended.
		for {
			if len(open) == 0 {
				return nil
			}
			var more bool
			var err error
			if open[len(open)-1] {
				_, more, err = s.objectKey(first)
			} else {
				more, err = s.arrayNext(first)
			}
			if err != nil {
				return err
			}
			if more {
				break
			}
			open = open[:len(open)-1]
			first = false
		}
	}
}

// skipScalar validates and skips a string, number, boolean or null.
func (s *jsonScanner) skipScalar() error {
	switch s.kind() {
	case kindString:
		return s.skipString()
	case kindNumber:
		_, err := s.readNumber()
		return err
	case kindBool:
		_, err := s.readBool()
		return err
	case kindNull:
		return s.readNull()
	}
	return s.syntaxError(errValueInvalid)
}

// skipString validates and skips a string without unescaping it.
func (s *jsonScanner) skipString() error {
	for i := s.pos + 1; i < len(s.buf); i++ {
		switch c := s.buf[i]; {
		case c == '"':
			s.pos = i + 1
			return nil
		case c == '\\':
			// Escapes are rare; validate them the slow way.
			_, err := s.appendString(s.tmp[:0])
			return err
		case c < 0x20:
			s.pos = i
			return s.syntaxError(errStrBadEncoding)
		}
	}
	s.pos = len(s.buf)
	return s.syntaxError(errStrMissQuote)
}

// paramValue is a parameter value read from JSON: bool, int64, uint64 (an
// integer beyond int64), float64 or string; badParam for null, objects and
// arrays.
type badParam struct{}

// readParamValue reads a scalar parameter value.
func (s *jsonScanner) readParamValue() (any, error) {
	switch s.kind() {
	case kindString:
		b, err := s.readString()
		if err != nil {
			return nil, err
		}
		return string(b), nil
	case kindNumber:
		n, err := s.readNumber()
		if err != nil {
			return nil, err
		}
		if v, ok := n.int64(); ok {
			return v, nil
		}
		if v, ok := n.uint64(); ok {
			return v, nil
		}
		return n.float(64), nil
	case kindBool:
		return s.readBool()
	}
	if err := s.skipValue(); err != nil {
		return nil, err
	}
	return badParam{}, nil
}
