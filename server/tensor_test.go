package server

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

func TestParseWireDataType(t *testing.T) {
	tests := []struct {
		in   string
		want backendapi.DataType
	}{
		{"FP32", backendapi.TypeFP32},
		{"BYTES", backendapi.TypeBytes},
		{"BOOL", backendapi.TypeBool},
		{"BF16", backendapi.TypeBF16},
		{"TYPE_FP32", backendapi.TypeInvalid},
		{"TYPE_STRING", backendapi.TypeInvalid},
		{"fp32", backendapi.TypeInvalid},
		{"", backendapi.TypeInvalid},
		{"INVALID", backendapi.TypeInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			if got := parseWireDataType(tc.in); got != tc.want {
				t.Fatalf("parseWireDataType(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestElementCount(t *testing.T) {
	tests := []struct {
		name  string
		shape []int64
		want  int64
	}{
		{"scalar", nil, 1},
		{"vector", []int64{16}, 16},
		{"matrix", []int64{2, 3, 4}, 24},
		{"zero dim", []int64{3, 0, 5}, 0},
		{"negative", []int64{-1, 4}, -1},
		{"overflow", []int64{1 << 40, 1 << 40}, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := elementCount(tc.shape); got != tc.want {
				t.Fatalf("elementCount(%v) = %d, want %d", tc.shape, got, tc.want)
			}
		})
	}
}

func TestBytesElements(t *testing.T) {
	data := bytesTensor("ab", "", "xyz")
	var got []string
	for rest := data; len(rest) > 0; {
		elem, next, ok := nextBytesElement(rest)
		if !ok {
			t.Fatalf("nextBytesElement failed on %x", rest)
		}
		got = append(got, string(elem))
		rest = next
	}
	if len(got) != 3 || got[0] != "ab" || got[1] != "" || got[2] != "xyz" {
		t.Fatalf("elements = %q", got)
	}
	for _, bad := range [][]byte{{1, 0}, {5, 0, 0, 0, 'a'}} {
		if _, _, ok := nextBytesElement(bad); ok {
			t.Errorf("nextBytesElement(%x) accepted a truncated element", bad)
		}
	}
}

func le16(vs ...uint16) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint16(b, v)
	}
	return b
}

func le64(vs ...uint64) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

func TestDecodeJSONData(t *testing.T) {
	tests := []struct {
		name  string
		dt    backendapi.DataType
		data  string
		want  []byte
		count int64
		err   string
	}{
		{"fp32 flat", backendapi.TypeFP32, `[1, 2.5, -3e-1, 0]`, ipctest.FP32(1, 2.5, -0.3, 0), 4, ""},
		{"fp32 nested", backendapi.TypeFP32, `[[1,2],[3,4]]`, ipctest.FP32(1, 2, 3, 4), 4, ""},
		{"fp32 ragged flattens", backendapi.TypeFP32, `[[1],[2,3]]`, ipctest.FP32(1, 2, 3), 3, ""},
		{"fp64", backendapi.TypeFP64, `[0.1, 1e300]`, le64(math.Float64bits(0.1), math.Float64bits(1e300)), 2, ""},
		{"int32", backendapi.TypeInt32, `[-1, 2147483647, -2147483648]`, i32(-1, 2147483647, -2147483648), 3, ""},
		{"int8", backendapi.TypeInt8, `[-128, 127]`, []byte{0x80, 0x7f}, 2, ""},
		{"int16", backendapi.TypeInt16, `[-2]`, le16(0xfffe), 1, ""},
		{"int64", backendapi.TypeInt64, `[-9223372036854775808]`, le64(1 << 63), 1, ""},
		{"uint8", backendapi.TypeUint8, `[0, 255]`, []byte{0, 255}, 2, ""},
		{"uint16", backendapi.TypeUint16, `[65535]`, le16(65535), 1, ""},
		{"uint64", backendapi.TypeUint64, `[18446744073709551615]`, le64(math.MaxUint64), 1, ""},
		{"bool", backendapi.TypeBool, `[true, false, true]`, []byte{1, 0, 1}, 3, ""},
		{"bytes", backendapi.TypeBytes, `["ab", "", "\u00e9"]`, bytesTensor("ab", "", "é"), 3, ""},
		{"empty", backendapi.TypeFP32, `[]`, nil, 0, ""},
		{"not an array", backendapi.TypeFP32, `1`, nil, 0, "Unable to parse 'data': attempt to access JSON non-array as array"},
		{"bool as number", backendapi.TypeBool, `[1]`, nil, 0, "Unable to parse 'data': attempt to access JSON non-boolean as boolean"},
		{"float for int", backendapi.TypeInt32, `[1.5]`, nil, 0, "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"},
		{"string for int", backendapi.TypeInt32, `["1"]`, nil, 0, "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"},
		{"negative uint", backendapi.TypeUint32, `[-1]`, nil, 0, "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer"},
		{"string for float", backendapi.TypeFP32, `["x"]`, nil, 0, "Unable to parse 'data': attempt to access JSON non-number as double"},
		{"null for float", backendapi.TypeFP32, `[null]`, nil, 0, "Unable to parse 'data': attempt to access JSON non-number as double"},
		{"number for bytes", backendapi.TypeBytes, `[1]`, nil, 0, "Unable to parse JSON bytes array: attempt to access JSON non-string as string"},
		{"int8 overflow", backendapi.TypeInt8, `[128]`, nil, 0, "Unable to parse 'data': value 128 is out of range for INT8"},
		{"uint8 overflow", backendapi.TypeUint8, `[256]`, nil, 0, "Unable to parse 'data': value 256 is out of range for UINT8"},
		{"object element", backendapi.TypeFP32, `[{}]`, nil, 0, "Unable to parse 'data': attempt to access JSON non-number as double"},
		{"syntax", backendapi.TypeFP32, `[1,,2]`, nil, 0, "failed to parse the request JSON buffer: Invalid value. at 3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sc := jsonScanner{buf: []byte(tc.data)}
			got, count, err := decodeJSONData(nil, &sc, tc.dt, -1)
			if wantError(t, err, tc.err) {
				if want := wantClass(tc.err); backendapi.CodeOf(err) != want {
					t.Fatalf("class = %v, want %v", backendapi.CodeOf(err), want)
				}
				return
			}
			if !bytes.Equal(got, tc.want) || count != tc.count {
				t.Fatalf("got %x (%d elements), want %x (%d)", got, count, tc.want, tc.count)
			}
		})
	}
}

func TestAppendJSONData(t *testing.T) {
	tests := []struct {
		name  string
		dt    backendapi.DataType
		data  []byte
		count int64
		want  string
		err   string
	}{
		{"fp32 shortest", backendapi.TypeFP32, ipctest.FP32(0.1, 2, -1.5, 1e6), 4, `[0.1,2,-1.5,1e+06]`, ""},
		{"fp32 specials", backendapi.TypeFP32, ipctest.FP32(float32(math.Inf(1)), float32(math.NaN())), 2, `[Infinity,NaN]`, ""},
		{"fp64", backendapi.TypeFP64, le64(math.Float64bits(0.1)), 1, `[0.1]`, ""},
		{"int32", backendapi.TypeInt32, i32(-5, 7), 2, `[-5,7]`, ""},
		{"int8", backendapi.TypeInt8, []byte{0xff}, 1, `[-1]`, ""},
		{"uint16", backendapi.TypeUint16, le16(65535), 1, `[65535]`, ""},
		{"uint64", backendapi.TypeUint64, le64(math.MaxUint64), 1, `[18446744073709551615]`, ""},
		{"int64", backendapi.TypeInt64, le64(1 << 63), 1, `[-9223372036854775808]`, ""},
		{"bool", backendapi.TypeBool, []byte{0, 1, 7}, 3, `[false,true,true]`, ""},
		{"bytes", backendapi.TypeBytes, bytesTensor("a\"b", "\x00", "\xff"), 3, `["a\"b","\u0000","\ufffd"]`, ""},
		{"empty", backendapi.TypeFP32, nil, 0, `[]`, ""},
		{"size mismatch", backendapi.TypeFP32, ipctest.FP32(1), 2, "", "output tensor shape does not match size of output for 'out'"},
		{"bytes truncated", backendapi.TypeBytes, []byte{9, 0, 0, 0, 'a'}, 1, "", "output tensor shape does not match size of output for 'out'"},
		{"fp16", backendapi.TypeFP16, le16(0x3c00), 1, "", "sending FP16 data via JSON is not supported. Please use the binary data format for output"},
		{"bf16", backendapi.TypeBF16, le16(0x3f80), 1, "", "sending BF16 data via JSON is not supported. Please use the binary data format for output"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := appendJSONData(nil, "out", tc.dt, tc.data, tc.count)
			if wantError(t, err, tc.err) {
				return
			}
			if string(got) != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// TestJSONRoundTrip decodes what the encoder writes, for every JSON type.
func TestJSONRoundTrip(t *testing.T) {
	tests := []struct {
		dt   backendapi.DataType
		data []byte
	}{
		{backendapi.TypeFP32, ipctest.FP32(0.1, -2.75, 3.4028235e38, 1.4e-45)},
		{backendapi.TypeFP64, le64(math.Float64bits(math.Pi), math.Float64bits(-1e-300))},
		{backendapi.TypeInt32, i32(math.MinInt32, math.MaxInt32, 0)},
		{backendapi.TypeUint64, le64(0, math.MaxUint64)},
		{backendapi.TypeBool, []byte{1, 0}},
		{backendapi.TypeBytes, bytesTensor("hello", "", "tab\tquote\"", "é中")},
	}
	for _, tc := range tests {
		t.Run(tc.dt.String(), func(t *testing.T) {
			count := int64(2)
			if size := tc.dt.Size(); size > 0 {
				count = int64(len(tc.data) / size)
			} else {
				count = 4
			}
			js, err := appendJSONData(nil, "x", tc.dt, tc.data, count)
			if err != nil {
				t.Fatal(err)
			}
			sc := jsonScanner{buf: js}
			back, n, err := decodeJSONData(nil, &sc, tc.dt, count)
			if err != nil {
				t.Fatalf("decoding %s: %v", js, err)
			}
			if n != count || !bytes.Equal(back, tc.data) {
				t.Fatalf("round trip of %s: got %x (%d), want %x (%d)", js, back, n, tc.data, count)
			}
		})
	}
}

func TestAppendJSONString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", `"plain"`},
		{"q\"b\\s", `"q\"b\\s"`},
		{"\n\r\t\x01", `"\n\r\t\u0001"`},
		{"é中😀", `"é中😀"`},
		{"bad\xffutf8", `"bad\ufffdutf8"`},
		{"<&>", `"<&>"`},
	}
	for _, tc := range tests {
		if got := string(appendJSONString(nil, tc.in)); got != tc.want {
			t.Errorf("appendJSONString(%q) = %s, want %s", tc.in, got, tc.want)
		}
		if got := string(appendJSONString(nil, []byte(tc.in))); got != tc.want {
			t.Errorf("appendJSONString([]byte(%q)) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
