package server

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"testing"
	"unicode/utf8"

	"github.com/stubvisor/stubvisor/backendapi"
	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"google.golang.org/protobuf/proto"
)

// FuzzParseInferRequest feeds arbitrary bodies to the infer parser. It must
// never panic, every error must be a client error, and an accepted request
// must be self-consistent: each input has exactly one data source, shapes
// are non-negative, and JSON-decoded fixed-size tensors have exactly the
// bytes their shape calls for.
func FuzzParseInferRequest(f *testing.F) {
	seeds := []string{
		`{"id":"r1","inputs":[{"name":"A","shape":[2,2],"datatype":"FP32","data":[[1,2],[3,4]]}]}`,
		`{"inputs":[{"data":[true,false],"name":"A","datatype":"BOOL","shape":[2]}]}`,
		`{"inputs":[{"name":"S","shape":[2],"datatype":"BYTES","data":["hi","\u00e9"]}]}`,
		`{"inputs":[{"name":"A","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":8}}],"outputs":[{"name":"O","parameters":{"binary_data":true}}]}`,
		`{"parameters":{"sequence_id":"c","sequence_start":true,"priority":1,"timeout":9,"x":1.5},"inputs":[]}`,
		`{"inputs":[{"name":"A","shape":[4],"datatype":"FP32","parameters":{"shared_memory_region":"r","shared_memory_byte_size":16}}]}`,
		`{"inputs":[{"name":"A","shape":[1],"datatype":"INT8","data":[128]}]}`,
		`{"inputs":[{"name":"A","shape":[0],"datatype":"UINT64","data":[]}],"outputs":[{"name":"O","parameters":{"classification":3}}]}`,
		`{"inputs":[`,
		`[]`,
		``,
	}
	for _, s := range seeds {
		f.Add([]byte(s), []byte{1, 2, 3, 4, 5, 6, 7, 8}, true)
		f.Add([]byte(s), []byte(nil), false)
	}
	f.Fuzz(func(t *testing.T, hdr, bin []byte, hdrGiven bool) {
		c := getCall()
		defer putCall(c)
		err := c.parseInferHeader("m", hdr, bin, hdrGiven)
		if err != nil {
			if code := backendapi.CodeOf(err); code != backendapi.InvalidArg && !isAccessorError(err) {
				t.Fatalf("error %q has class %v, want INVALID_ARG or a JSON accessor error", err, code)
			}
			return
		}
		for i, in := range c.req.Inputs {
			if (in.Data != nil) == (in.SharedMemory != nil) {
				t.Fatalf("input %d (%s) has data %v and shared memory %v", i, in.Name, in.Data != nil, in.SharedMemory != nil)
			}
			n := elementCount(in.Shape)
			if n < 0 {
				for _, d := range in.Shape {
					if d < 0 {
						t.Fatalf("input %s has negative dim in %v", in.Name, in.Shape)
					}
				}
			}
			if c.slots[i].jsonData && in.DataType.Size() > 0 && int64(len(in.Data)) != n*int64(in.DataType.Size()) {
				t.Fatalf("input %s: %d bytes for shape %v of %v", in.Name, len(in.Data), in.Shape, in.DataType)
			}
		}
		if len(c.kinds) != len(c.req.Outputs) {
			t.Fatalf("%d output kinds for %d outputs", len(c.kinds), len(c.req.Outputs))
		}
	})
}

// FuzzJSONData checks that decoding JSON tensor data never panics and that
// whatever decodes re-encodes and decodes to the same bytes (except
// invalid UTF-8 and non-finite floats, which JSON cannot carry).
func FuzzJSONData(f *testing.F) {
	for _, s := range []string{`[1,2.5,-3]`, `[[true],[false]]`, `["a","\n"]`, `[18446744073709551615]`, `[1e39]`, `[[[`} {
		for dt := backendapi.TypeBool; dt <= backendapi.TypeBF16; dt++ {
			f.Add([]byte(s), uint8(dt))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, dtCode uint8) {
		dt := backendapi.DataType(dtCode)
		if !decodable(dt) {
			return
		}
		sc := jsonScanner{buf: data}
		out, n, err := decodeJSONData(nil, &sc, dt, -1)
		if err != nil {
			return
		}
		if dt == backendapi.TypeBytes && !validElements(out) {
			// Invalid UTF-8 is written as U+FFFD so that replies stay
			// valid JSON; it cannot round-trip.
			return
		}
		js, err := appendJSONData(nil, "x", dt, out, n)
		if err != nil {
			t.Fatalf("re-encoding %x as %v: %v", out, dt, err)
		}
		sc = jsonScanner{buf: js}
		back, m, err := decodeJSONData(nil, &sc, dt, n)
		if err != nil || m != n || string(back) != string(out) {
			// NaN payloads are the one thing JSON cannot carry exactly.
			if dt == backendapi.TypeFP32 || dt == backendapi.TypeFP64 {
				return
			}
			t.Fatalf("round trip of %s as %v: %x (%d) -> %s -> %x (%d), %v", data, dt, out, n, js, back, m, err)
		}
	})
}

// validElements reports whether every element of a BYTES tensor is UTF-8.
func validElements(data []byte) bool {
	for len(data) > 0 {
		elem, rest, ok := nextBytesElement(data)
		if !ok || !utf8.Valid(elem) {
			return false
		}
		data = rest
	}
	return true
}

// FuzzRoute sends arbitrary paths, methods and bodies through the whole
// HTTP handler: it must always answer, never panic, and every error reply
// must be Triton's {"error": ...} JSON.
func FuzzRoute(f *testing.F) {
	for _, p := range []string{
		"/v2", "/v2/models/add_sub/versions/1/infer", "/v2/models/a%2Fb/ready", "/v2/repository/r/models/m/load",
		"/v2/systemsharedmemory/region/x/register", "/v2/cudasharedmemory/status", "/v2/models//infer", "/v2/logging",
		"/v2/models/identity/infer", "/v2/stubs",
	} {
		f.Add("POST", p, []byte(`{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","data":[1]}]}`), "")
		f.Add("GET", p, []byte(nil), "0")
	}
	b := newTestBackend()
	s, err := New(b, Options{MaxInputSize: 1 << 16})
	if err != nil {
		f.Fatal(err)
	}
	h := s.HTTPHandler()
	f.Fuzz(func(t *testing.T, method, path string, body []byte, hdrLen string) {
		u, err := url.ParseRequestURI(path)
		if err != nil || !validMethod(method) {
			return
		}
		req := httptest.NewRequest(method, "http://x/", bytes.NewReader(body))
		req.URL = u
		if hdrLen != "" {
			req.Header.Set(hdrInferHeaderLength, hdrLen)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 400 && rec.Body.Len() > 0 {
			var e struct {
				Error *string `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == nil {
				t.Fatalf("%s %s: status %d with body %q, want {\"error\": ...}", method, path, rec.Code, rec.Body.Bytes())
			}
		}
	})
}

func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for _, c := range m {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

// FuzzParseGRPCInfer feeds arbitrary ModelInferRequest messages (as the
// bytes a client sends) to the gRPC request conversion. It must never
// panic, every refusal must be a client error, and an accepted request
// must be self-consistent: each input has exactly one data source and
// typed contents convert to whole elements. (Sizes against shapes are the
// backend's check: it knows the model's inputs.)
func FuzzParseGRPCInfer(f *testing.F) {
	seeds := []*pb.ModelInferRequest{
		{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "A", Datatype: "FP32", Shape: []int64{2}}}, RawInputContents: [][]byte{make([]byte, 8)}},
		{ModelName: "m", ModelVersion: "1", Id: "r", Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "A", Datatype: "INT32", Shape: []int64{1, 2}, Contents: &pb.InferTensorContents{IntContents: []int32{1, 2}}},
			{Name: "S", Datatype: "BYTES", Shape: []int64{2}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("a"), nil}}},
			{Name: "B", Datatype: "BOOL", Shape: []int64{1}, Contents: &pb.InferTensorContents{BoolContents: []bool{true}}},
		}, Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "O", Parameters: map[string]*pb.InferParameter{"classification": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 2}}}}}},
		{ModelName: "m", Parameters: map[string]*pb.InferParameter{
			"sequence_id":    {ParameterChoice: &pb.InferParameter_StringParam{StringParam: "c"}},
			"sequence_start": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}},
			"priority":       {ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: 1}},
			"timeout":        {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 9}},
			"x":              {ParameterChoice: &pb.InferParameter_DoubleParam{DoubleParam: 1.5}},
		}},
		{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "A", Datatype: "FP32", Shape: []int64{4}, Parameters: map[string]*pb.InferParameter{
			"shared_memory_region":    {ParameterChoice: &pb.InferParameter_StringParam{StringParam: "r"}},
			"shared_memory_byte_size": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 16}},
		}}}},
		{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "A", Datatype: "FP16", Shape: []int64{-1}}}, RawInputContents: [][]byte{{1}}},
	}
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, wire []byte) {
		var req pb.ModelInferRequest
		if proto.Unmarshal(wire, &req) != nil {
			return
		}
		var ir backendapi.InferRequest
		if _, err := parseGRPCInfer(&req, &ir); err != nil {
			if code := backendapi.CodeOf(err); code != backendapi.InvalidArg {
				t.Fatalf("error %q has class %v, want INVALID_ARG", err, code)
			}
			return
		}
		for _, in := range ir.Inputs {
			if (in.Data != nil) == (in.SharedMemory != nil) && !(in.Data == nil && elementCount(in.Shape) == 0) {
				t.Fatalf("input %s has data %v and shared memory %v", in.Name, in.Data != nil, in.SharedMemory != nil)
			}
			if size := in.DataType.Size(); len(req.RawInputContents) == 0 && in.SharedMemory == nil && size > 0 && len(in.Data)%size != 0 {
				t.Fatalf("input %s: %d bytes of %v contents", in.Name, len(in.Data), in.DataType)
			}
		}
	})
}

// isAccessorError reports whether err is one of Triton's JSON accessor
// errors (class INTERNAL, see fieldError) rather than a request error.
func isAccessorError(err error) bool {
	return backendapi.CodeOf(err) == backendapi.Internal && !isSyntaxError(err)
}
