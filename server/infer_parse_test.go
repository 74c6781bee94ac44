package server

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

func TestParseInferHeader(t *testing.T) {
	type want struct {
		req   backendapi.InferRequest
		kinds map[string]outKind // kindOf per output name
	}
	tests := []struct {
		name     string
		hdr      string
		bin      []byte
		noHeader bool // no Inference-Header-Content-Length
		want     want
	}{
		{
			name: "json fp32 and int32",
			hdr: `{"id":"r1","inputs":[{"name":"A","shape":[2,2],"datatype":"FP32","data":[[1,2],[3,4]]},` +
				`{"name":"B","shape":[3],"datatype":"INT32","data":[-1,0,1]}]}`,
			want: want{req: backendapi.InferRequest{ID: "r1", Inputs: []backendapi.InputTensor{
				{Name: "A", DataType: backendapi.TypeFP32, Shape: []int64{2, 2}, Data: ipctest.FP32(1, 2, 3, 4)},
				{Name: "B", DataType: backendapi.TypeInt32, Shape: []int64{3}, Data: i32(-1, 0, 1)},
			}}, kinds: map[string]outKind{"X": outJSON}},
		},
		{
			name: "data before datatype and shape",
			hdr:  `{"inputs":[{"data":[true,false],"name":"A","datatype":"BOOL","shape":[2]}]}`,
			want: want{req: backendapi.InferRequest{Inputs: []backendapi.InputTensor{
				{Name: "A", DataType: backendapi.TypeBool, Shape: []int64{2}, Data: []byte{1, 0}},
			}}},
		},
		{
			name: "bytes",
			hdr:  `{"inputs":[{"name":"S","shape":[1,2],"datatype":"BYTES","data":["hi","\u00e9"]}]}`,
			want: want{req: backendapi.InferRequest{Inputs: []backendapi.InputTensor{
				{Name: "S", DataType: backendapi.TypeBytes, Shape: []int64{1, 2}, Data: bytesTensor("hi", "é")},
			}}},
		},
		{
			name: "binary inputs in order",
			hdr: `{"inputs":[{"name":"A","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":8}},` +
				`{"name":"B","shape":[1],"datatype":"FP16","parameters":{"binary_data_size":2}}],` +
				`"outputs":[{"name":"O0","parameters":{"binary_data":true}},{"name":"O1"}]}`,
			bin: append(ipctest.FP32(5, 6), 0x00, 0x3c),
			want: want{req: backendapi.InferRequest{
				Inputs: []backendapi.InputTensor{
					{Name: "A", DataType: backendapi.TypeFP32, Shape: []int64{2}, Data: ipctest.FP32(5, 6)},
					{Name: "B", DataType: backendapi.TypeFP16, Shape: []int64{1}, Data: []byte{0x00, 0x3c}},
				},
				Outputs: []backendapi.RequestedOutput{{Name: "O0"}, {Name: "O1"}},
			}, kinds: map[string]outKind{"O0": outBinary, "O1": outJSON, "other": outJSON}},
		},
		{
			name: "zero-size binary input",
			hdr:  `{"inputs":[{"name":"A","shape":[0],"datatype":"FP32","parameters":{"binary_data_size":0}}]}`,
			want: want{req: backendapi.InferRequest{Inputs: []backendapi.InputTensor{
				{Name: "A", DataType: backendapi.TypeFP32, Shape: []int64{0}, Data: []byte{}},
			}}},
		},
		{
			name: "zero elements ignore data",
			hdr:  `{"inputs":[{"name":"A","shape":[2,0],"datatype":"INT32","data":[]}]}`,
			want: want{req: backendapi.InferRequest{Inputs: []backendapi.InputTensor{
				{Name: "A", DataType: backendapi.TypeInt32, Shape: []int64{2, 0}, Data: []byte{}},
			}}},
		},
		{
			name: "shared memory input and output",
			hdr: `{"inputs":[{"name":"A","shape":[4],"datatype":"FP32","parameters":{"shared_memory_region":"in","shared_memory_offset":16,"shared_memory_byte_size":16}}],` +
				`"outputs":[{"name":"O","parameters":{"shared_memory_region":"out","shared_memory_byte_size":16}}]}`,
			want: want{req: backendapi.InferRequest{
				Inputs: []backendapi.InputTensor{{Name: "A", DataType: backendapi.TypeFP32, Shape: []int64{4},
					SharedMemory: &backendapi.SharedMemoryRef{Region: "in", Offset: 16, ByteSize: 16}}},
				Outputs: []backendapi.RequestedOutput{{Name: "O", SharedMemory: &backendapi.SharedMemoryRef{Region: "out", ByteSize: 16}}},
			}, kinds: map[string]outKind{"O": outSHM}},
		},
		{
			name: "request parameters",
			hdr: `{"parameters":{"sequence_id":"corr","sequence_start":true,"sequence_end":false,"priority":2,"timeout":250,` +
				`"binary_data_output":true,"custom":"v","n":-3,"f":0.5,"b":true},` +
				`"inputs":[{"name":"A","shape":[1],"datatype":"FP32","data":[1]}],"outputs":[{"name":"J","parameters":{"binary_data":false,"classification":3}}]}`,
			want: want{req: backendapi.InferRequest{
				CorrelationID: backendapi.CorrelationID{String: "corr", IsText: true},
				Flags:         backendapi.FlagSequenceStart,
				Priority:      2,
				Timeout:       250 * time.Microsecond,
				Parameters:    map[string]any{"custom": "v", "n": int64(-3), "f": 0.5, "b": true},
				Inputs:        []backendapi.InputTensor{{Name: "A", DataType: backendapi.TypeFP32, Shape: []int64{1}, Data: ipctest.FP32(1)}},
				Outputs:       []backendapi.RequestedOutput{{Name: "J", Classification: 3}},
			}, kinds: map[string]outKind{"J": outJSON, "unlisted": outBinary}},
		},
		{
			name: "outputs before binary_data_output",
			hdr:  `{"outputs":[{"name":"O"}],"parameters":{"binary_data_output":true},"inputs":[]}`,
			want: want{req: backendapi.InferRequest{Outputs: []backendapi.RequestedOutput{{Name: "O"}}},
				kinds: map[string]outKind{"O": outBinary}},
		},
		{
			name: "unknown members ignored",
			hdr:  `{"extra":{"deep":[1,{"x":null}]},"inputs":[{"name":"A","shape":[1],"datatype":"UINT8","data":[7],"foo":1}]}`,
			want: want{req: backendapi.InferRequest{Inputs: []backendapi.InputTensor{
				{Name: "A", DataType: backendapi.TypeUint8, Shape: []int64{1}, Data: []byte{7}},
			}}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := getCall()
			t.Cleanup(func() { putCall(c) })
			if err := c.parseInferHeader("m", []byte(tc.hdr), tc.bin, !tc.noHeader); err != nil {
				t.Fatal(err)
			}
			got := cloneRequest(&c.req)
			want := tc.want.req
			if want.Inputs == nil {
				want.Inputs = []backendapi.InputTensor{}
			}
			if got.Outputs == nil {
				got.Outputs = nil
			}
			if len(got.Outputs) == 0 {
				got.Outputs = nil
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("request\n got %+v\nwant %+v", got, want)
			}
			for name, k := range tc.want.kinds {
				if got := c.kindOf(name); got != k {
					t.Errorf("kindOf(%q) = %d, want %d", name, got, k)
				}
			}
		})
	}
}

func TestParseInferHeaderErrors(t *testing.T) {
	const fp32A = `{"name":"A","shape":[1],"datatype":"FP32","data":[1]}`
	tests := []struct {
		name     string
		hdr      string
		bin      []byte
		noHeader bool
		err      string
	}{
		{"not json", `{"inputs":`, nil, false, "failed to parse the request JSON buffer: Invalid value. at 10"},
		{"empty", ``, nil, false, "failed to parse the request JSON buffer: The document is empty. at 0"},
		{"root array", `[]`, nil, false, "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'"},
		{"no inputs", `{"id":"x"}`, nil, false, "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'"},
		{"inputs not array", `{"inputs":{}}`, nil, false, "Unable to parse 'inputs': attempt to access JSON non-array as array"},
		{"id not string", `{"id":1,"inputs":[]}`, nil, false, "Unable to parse 'id': attempt to access JSON non-string as string"},
		{"syntax wins over content", `{"id":1,"inputs":[} `, nil, false, "failed to parse the request JSON buffer: Invalid value. at 18"},
		{"no data", `{"inputs":[{"name":"A","shape":[1],"datatype":"FP32"}]}`, nil, false,
			"Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'. But no field is set"},
		{"data and binary", `{"inputs":[{"name":"A","shape":[1],"datatype":"FP32","data":[1],"parameters":{"binary_data_size":4}}]}`, ipctest.FP32(1), false,
			"Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'. But set 'data' 'binary_data_size'"},
		{"input not object", `{"inputs":[1]}`, nil, false,
			"Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'. But no field is set"},
		{"missing name", `{"inputs":[{"shape":[1],"datatype":"FP32","data":[1]}]}`, nil, false, "Unable to parse 'name': attempt to access non-existing object member 'name'"},
		{"name not string", `{"inputs":[{"name":3,"shape":[1],"datatype":"FP32","data":[1]}]}`, nil, false, "Unable to parse 'name': attempt to access JSON non-string as string"},
		{"missing datatype", `{"inputs":[{"name":"A","shape":[1],"data":[1]}]}`, nil, false, "Unable to parse 'datatype': attempt to access non-existing object member 'datatype'"},
		{"missing shape", `{"inputs":[{"name":"A","datatype":"FP32","data":[1]}]}`, nil, false, "Unable to parse 'shape': attempt to access non-existing object member 'shape'"},
		{"negative dim", `{"inputs":[{"name":"A","shape":[-1],"datatype":"FP32","data":[1]}]}`, nil, false, "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer"},
		{"shape not array", `{"inputs":[{"name":"A","shape":1,"datatype":"FP32","data":[1]}]}`, nil, false, "Unable to parse 'shape': attempt to access JSON non-array as array"},
		{"bad datatype", `{"inputs":[{"name":"A","shape":[1],"datatype":"FLOAT","data":[1]}]}`, nil, false, "invalid datatype for input A"},
		{"fp16 json", `{"inputs":[{"name":"A","shape":[1],"datatype":"FP16","data":[1]}]}`, nil, false,
			"receiving FP16 data via JSON is not supported. Please use the binary data format for input A"},
		{"bf16 json", `{"inputs":[{"name":"A","shape":[1],"datatype":"BF16","data":[1]}]}`, nil, false,
			"receiving BF16 data via JSON is not supported. Please use the binary data format for input A"},
		{"too few elements", `{"inputs":[{"name":"A","shape":[3],"datatype":"FP32","data":[1,2]}]}`, nil, false,
			"Unable to parse 'data': Shape does not match true shape of 'data' field"},
		{"too many elements", `{"inputs":[{"name":"A","shape":[1],"datatype":"INT32","data":[1,2]}]}`, nil, false,
			"Unable to parse 'data': Shape does not match true shape of 'data' field"},
		{"bytes count", `{"inputs":[{"name":"A","shape":[2],"datatype":"BYTES","data":["a"]}]}`, nil, false,
			"Unable to parse 'data': Shape does not match true shape of 'data' field"},
		{"huge shape small data", `{"inputs":[{"name":"A","shape":[4294967296,4294967296],"datatype":"FP64","data":[1]}]}`, nil, false,
			"invalid shape for input 'A': shape [4294967296,4294967296] causes total element count to exceed maximum size of 9223372036854775807"},
		{"large shape small data", `{"inputs":[{"name":"A","shape":[4294967296,1024],"datatype":"FP64","data":[1]}]}`, nil, false,
			"Unable to parse 'data': Shape does not match true shape of 'data' field"},
		{"byte size overflow", `{"inputs":[{"name":"A","shape":[4,1152921504606846978],"datatype":"FP32","data":[1]}]}`, nil, false,
			"byte size overflow for input 'A': element count (4611686018427387912) * data type size (4) exceeds maximum allowed size (9223372036854775807)"},
		{"data nested too deep", `{"inputs":[{"name":"A","shape":[1],"datatype":"INT32","data":` + strings.Repeat("[", 100) + "1" + strings.Repeat("]", 100) + `}]}`, nil, false,
			"JSON nesting depth exceeds maximum allowed limit (100)"},
		{"duplicate output", `{"inputs":[{"name":"A","shape":[1],"datatype":"INT32","data":[1]}],"outputs":[{"name":"O"},{"name":"O"}]}`, nil, false,
			"output 'O' already exists in request"},
		{"wrong element type", `{"inputs":[{"name":"A","shape":[1],"datatype":"INT32","data":["x"]}]}`, nil, false,
			"Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"},
		{"duplicate input", `{"inputs":[` + fp32A + `,` + fp32A + `]}`, nil, false, "input 'A' already exists in request"},
		{"binary truncated", `{"inputs":[{"name":"A","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":8}}]}`, ipctest.FP32(1), false,
			"unexpected size for input 'A', expecting 4 additional bytes for model 'm'"},
		{"binary leftover", `{"inputs":[{"name":"A","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":4}}]}`, ipctest.FP32(1, 2), false,
			"unexpected additional input data for model 'm'"},
		{"binary without header length", `{"inputs":[{"name":"A","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":4}}]}`, nil, true,
			"must specify valid 'Infer-Header-Content-Length' in request header and 'binary_data_size' when passing inputs in binary data format"},
		{"binary size not uint", `{"inputs":[{"name":"A","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":"4"}}]}`, nil, false,
			"Unable to parse 'binary_data_size': attempt to access JSON non-unsigned-integer as unsigned-integer"},
		{"params not object", `{"parameters":[],"inputs":[]}`, nil, false, "failed to get request params.: attempt to get members for non-object"},
		{"reserved param", `{"parameters":{"triton_x":1},"inputs":[]}`, nil, false,
			"parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified."},
		{"param wrong type", `{"parameters":{"sequence_start":1},"inputs":[]}`, nil, false,
			"Unable to parse 'sequence_start': attempt to access JSON non-boolean as boolean"},
		{"custom param object", `{"parameters":{"x":{}},"inputs":[]}`, nil, false,
			"parameter 'x' has invalid type. It should be either 'int', 'bool', or 'string'."},
		{"params error before inputs error", `{"inputs":{},"parameters":{"priority":-1}}`, nil, false,
			"Unable to parse 'priority': attempt to access JSON non-unsigned-integer as unsigned-integer"},
		{"outputs not array", `{"inputs":[],"outputs":{}}`, nil, false, "Unable to parse 'outputs': attempt to access JSON non-array as array"},
		{"output without name", `{"inputs":[],"outputs":[{}]}`, nil, false, "Unable to parse 'name': attempt to access non-existing object member 'name'"},
		{"output shm and binary", `{"inputs":[],"outputs":[{"name":"O","parameters":{"shared_memory_region":"r","binary_data":true}}]}`, nil, false,
			"Output can't set both 'shared_memory_region' and 'binary_data'"},
		{"output shm and classification", `{"inputs":[],"outputs":[{"name":"O","parameters":{"shared_memory_region":"r","classification":2}}]}`, nil, false,
			"Output can't set both 'shared_memory_region' and 'classification'"},
		{"binary_data not bool", `{"inputs":[],"outputs":[{"name":"O","parameters":{"binary_data":1}}]}`, nil, false,
			"Unable to parse 'binary_data': attempt to access JSON non-boolean as boolean"},
		{"classification not uint", `{"inputs":[],"outputs":[{"name":"O","parameters":{"classification":-2}}]}`, nil, false,
			"Unable to set 'classification': attempt to access JSON non-unsigned-integer as unsigned-integer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := getCall()
			t.Cleanup(func() { putCall(c) })
			err := c.parseInferHeader("m", []byte(tc.hdr), tc.bin, !tc.noHeader)
			if err == nil || err.Error() != tc.err {
				t.Fatalf("error = %v\nwant %q", err, tc.err)
			}
			if want := wantClass(tc.err); backendapi.CodeOf(err) != want {
				t.Fatalf("class = %v, want %v", backendapi.CodeOf(err), want)
			}
		})
	}
}

// TestCallReuse parses requests of different shapes with one pooled call to
// check that nothing leaks from one request into the next.
func TestCallReuse(t *testing.T) {
	c := getCall()
	t.Cleanup(func() { putCall(c) })
	first := `{"id":"a","parameters":{"k":"v","binary_data_output":true},"inputs":[{"name":"A","shape":[2],"datatype":"INT32","data":[1,2]}],"outputs":[{"name":"O"}]}`
	if err := c.parseInferHeader("m", []byte(first), nil, false); err != nil {
		t.Fatal(err)
	}
	putCall(c)
	c = getCall()
	second := `{"inputs":[{"name":"B","shape":[1],"datatype":"FP32","data":[3]}]}`
	if err := c.parseInferHeader("m", []byte(second), nil, false); err != nil {
		t.Fatal(err)
	}
	want := backendapi.InferRequest{Inputs: []backendapi.InputTensor{{Name: "B", DataType: backendapi.TypeFP32, Shape: []int64{1}, Data: ipctest.FP32(3)}}}
	got := cloneRequest(&c.req)
	got.Outputs = nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("second request = %+v, want %+v", got, want)
	}
	if k := c.kindOf("O"); k != outJSON {
		t.Fatalf("output kind leaked from the first request: %d", k)
	}
}

func TestBuildRawRequest(t *testing.T) {
	meta := func(dt backendapi.DataType, shape ...int64) *backendapi.ModelMetadata {
		return &backendapi.ModelMetadata{Inputs: []backendapi.TensorMetadata{{Name: "IN", DataType: dt, Shape: shape}}}
	}
	tests := []struct {
		name     string
		md       *backendapi.ModelMetadata
		maxBatch int32
		data     []byte
		shape    []int64
		wantData []byte
		err      string
	}{
		{"variable dim", meta(backendapi.TypeFP32, -1), 0, ipctest.FP32(1, 2, 3), []int64{3}, ipctest.FP32(1, 2, 3), ""},
		{"fixed dims", meta(backendapi.TypeInt32, 2, 2), 0, i32(1, 2, 3, 4), []int64{2, 2}, i32(1, 2, 3, 4), ""},
		{"batched", meta(backendapi.TypeFP32, -1, -1), 4, ipctest.FP32(1, 2), []int64{1, 2}, ipctest.FP32(1, 2), ""},
		{"bytes is one element", meta(backendapi.TypeBytes, 1), 0, []byte("raw text"), []int64{1}, bytesTensor("raw text"), ""},
		{"two variable dims", meta(backendapi.TypeFP32, -1, -1), 0, ipctest.FP32(1), nil, nil,
			"The shape of the raw input 'IN' can not be deduced because there are more than one variable-sized dimension"},
		{"partial element", meta(backendapi.TypeFP32, -1), 0, []byte{1, 2, 3}, nil, nil,
			"raw binary request to model 'm': 3 bytes do not fill whole elements of input 'IN'"},
		{"two inputs", &backendapi.ModelMetadata{Inputs: make([]backendapi.TensorMetadata, 2)}, 0, nil, nil, nil,
			"Raw request must only have 1 input (found 1) to be deduced but got 2 inputs in 'm' model configuration"},
		{"bytes of many elements", meta(backendapi.TypeBytes, -1), 0, []byte("x"), nil, nil,
			"For BYTE datatype raw input 'IN', the model must have input shape [1]"},
		{"batched bytes of many elements", meta(backendapi.TypeBytes, -1, 2), 8, []byte("x"), nil, nil,
			"For BYTE datatype raw input 'IN', the model must have input shape [1]"},
		{"batched bytes", meta(backendapi.TypeBytes, -1, 1), 8, []byte("ab"), []int64{1, 1}, bytesTensor("ab"), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := getCall()
			t.Cleanup(func() { putCall(c) })
			err := c.buildRawRequest("m", tc.md, tc.maxBatch, tc.data)
			if wantError(t, err, tc.err) {
				return
			}
			in := c.req.Inputs[0]
			if in.Name != "IN" || !reflect.DeepEqual(in.Shape, tc.shape) || !reflect.DeepEqual(in.Data, tc.wantData) {
				t.Fatalf("input = %+v, want shape %v data %x", in, tc.shape, tc.wantData)
			}
			if c.kindOf("any") != outBinary {
				t.Fatalf("raw requests must return binary outputs")
			}
		})
	}
}
