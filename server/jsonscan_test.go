package server

import (
	"testing"

	"github.com/stubvisor/stubvisor/backendapi"
)

func TestJSONScannerSkipValue(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		err  string // "" for a valid document
	}{
		{"object", `{"a": [1, -2.5e3, "x\n\u00e9", true, false, null, {}], "b": {}}`, ""},
		{"whitespace", " \t\r\n[ ] \n", ""},
		{"empty", "", "failed to parse the request JSON buffer: The document is empty. at 0"},
		{"only space", "   ", "failed to parse the request JSON buffer: The document is empty. at 3"},
		{"trailing value", `{} {}`, "failed to parse the request JSON buffer: The document root must not be followed by other values. at 3"},
		{"bad literal", `[tru]`, "failed to parse the request JSON buffer: Invalid value. at 1"},
		{"missing comma in array", `[1 2]`, "failed to parse the request JSON buffer: Missing a comma or ']' after an array element. at 3"},
		{"missing comma in object", `{"a":1 "b":2}`, "failed to parse the request JSON buffer: Missing a comma or '}' after an object member. at 7"},
		{"missing name", `{1:2}`, "failed to parse the request JSON buffer: Missing a name for object member. at 1"},
		{"trailing comma", `{"a":1,}`, "failed to parse the request JSON buffer: Missing a name for object member. at 7"},
		{"missing colon", `{"a" 1}`, "failed to parse the request JSON buffer: Missing a colon after a name of object member. at 5"},
		{"unterminated string", `["abc`, "failed to parse the request JSON buffer: Missing a closing quotation mark in string. at 5"},
		{"bad escape", `["a\x"]`, "failed to parse the request JSON buffer: Invalid escape character in string. at 3"},
		{"bad hex", `["\u12G4"]`, "failed to parse the request JSON buffer: Incorrect hex digit after \\u escape in string. at 4"},
		{"lone low surrogate", `["\udc00"]`, "failed to parse the request JSON buffer: The surrogate pair in string is invalid. at 8"},
		{"control char", "[\"a\x01\"]", "failed to parse the request JSON buffer: Invalid encoding in string. at 3"},
		{"fraction", `[1.]`, "failed to parse the request JSON buffer: Miss fraction part in number. at 3"},
		{"exponent", `[1e+]`, "failed to parse the request JSON buffer: Miss exponent in number. at 4"},
		{"leading plus", `[+1]`, "failed to parse the request JSON buffer: Invalid value. at 1"},
		{"minus alone", `[-]`, "failed to parse the request JSON buffer: Invalid value. at 2"},
		{"unclosed array", `[1,`, "failed to parse the request JSON buffer: Invalid value. at 3"},
		{"unclosed object", `{"a":1`, "failed to parse the request JSON buffer: Missing a comma or '}' after an object member. at 6"},
		// Nesting is not bounded by the scanner (Triton parses such bodies
		// too, then refuses them by content), nor does it grow the stack.
		{"deeply nested", deepArray(250000), ""},
		{"deeply nested and unclosed", deepArray(250000)[:250001], "failed to parse the request JSON buffer: Missing a comma or ']' after an array element. at 250001"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var sc jsonScanner
			sc.reset([]byte(tc.doc))
			err := sc.begin()
			if err == nil {
				err = sc.skipValue()
			}
			if err == nil {
				err = sc.end()
			}
			if tc.err == "" {
				if err != nil {
					t.Fatalf("valid document refused: %v", err)
				}
				return
			}
			if err == nil || err.Error() != tc.err {
				t.Fatalf("error = %v, want %q", err, tc.err)
			}
			if !isSyntaxError(err) || backendapi.CodeOf(err) != backendapi.InvalidArg {
				t.Fatalf("error %v: want a syntax error of class INVALID_ARG, got class %v", err, backendapi.CodeOf(err))
			}
		})
	}
}

func deepArray(n int) string {
	b := make([]byte, 0, 2*n)
	for range n {
		b = append(b, '[')
	}
	for range n {
		b = append(b, ']')
	}
	return string(b)
}

func TestJSONScannerStrings(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"plain", `"abc"`, "abc"},
		{"escapes", `"a\"b\\c\/d\b\f\n\r\t"`, "a\"b\\c/d\b\f\n\r\t"},
		{"unicode", `"\u00e9\u4e2d"`, "é中"},
		{"surrogate pair", `"\ud83d\ude00"`, "😀"},
		{"raw utf8", `"é😀"`, "é😀"},
		{"empty", `""`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sc := jsonScanner{buf: []byte(tc.doc)}
			got, err := sc.readString()
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			if sc.pos != len(tc.doc) {
				t.Fatalf("scanner at %d, want %d", sc.pos, len(tc.doc))
			}
		})
	}
}

func TestJSONNumbers(t *testing.T) {
	tests := []struct {
		doc      string
		u        uint64
		uok      bool
		i        int64
		iok      bool
		f32, f64 float64
	}{
		{"0", 0, true, 0, true, 0, 0},
		{"42", 42, true, 42, true, 42, 42},
		{"-7", 0, false, -7, true, -7, -7},
		{"18446744073709551615", 18446744073709551615, true, 0, false, 1.8446744073709552e19, 1.8446744073709552e19},
		{"18446744073709551616", 0, false, 0, false, 1.8446744073709552e19, 1.8446744073709552e19},
		{"-9223372036854775808", 0, false, -9223372036854775808, true, -9.223372036854776e18, -9.223372036854776e18},
		{"1.5", 0, false, 0, false, 1.5, 1.5},
		{"0.1", 0, false, 0, false, float64(float32(0.1)), 0.1},
		{"1e3", 0, false, 0, false, 1000, 1000},
		{"1e400", 0, false, 0, false, posInf, posInf},
		{"16777217", 16777217, true, 16777217, true, 16777216, 16777217},
	}
	for _, tc := range tests {
		t.Run(tc.doc, func(t *testing.T) {
			sc := jsonScanner{buf: []byte(tc.doc)}
			n, err := sc.readNumber()
			if err != nil {
				t.Fatal(err)
			}
			if u, ok := n.uint64(); ok != tc.uok || u != tc.u {
				t.Errorf("uint64 = %d, %v; want %d, %v", u, ok, tc.u, tc.uok)
			}
			if i, ok := n.int64(); ok != tc.iok || i != tc.i {
				t.Errorf("int64 = %d, %v; want %d, %v", i, ok, tc.i, tc.iok)
			}
			if f := n.float(32); f != tc.f32 {
				t.Errorf("float(32) = %v, want %v", f, tc.f32)
			}
			if f := n.float(64); f != tc.f64 {
				t.Errorf("float(64) = %v, want %v", f, tc.f64)
			}
		})
	}
}

var posInf = func() float64 { var z float64; return 1 / z }()
