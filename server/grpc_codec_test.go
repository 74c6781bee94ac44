package server

import (
	"bytes"
	"testing"
	"unsafe"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// frames cuts b into the 16 KiB pieces the transport hands the codec.
func frames(b []byte) mem.BufferSlice {
	var out mem.BufferSlice
	for len(b) > 0 {
		n := min(len(b), 16<<10)
		out = append(out, mem.SliceBuffer(b[:n]))
		b = b[n:]
	}
	return out
}

func TestTensorCodecRequest(t *testing.T) {
	large := &pb.ModelInferRequest{
		ModelName: "identity", Id: "r1",
		Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "A", Datatype: "FP32", Shape: []int64{1 << 16}},
			{Name: "B", Datatype: "UINT8", Shape: []int64{3}},
		},
		Parameters:       map[string]*pb.InferParameter{"p": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 5}}},
		RawInputContents: [][]byte{pattern(1<<18, 1), pattern(3, 9)},
	}
	small := &pb.ModelInferRequest{ModelName: "add_sub", RawInputContents: [][]byte{pattern(64, 2)}}
	encoded := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// The raw entries first, then the rest: any order decodes the same.
	reordered := append(encoded(&pb.ModelInferRequest{RawInputContents: large.RawInputContents}),
		encoded(&pb.ModelInferRequest{ModelName: large.ModelName, Id: large.Id, Inputs: large.Inputs, Parameters: large.Parameters})...)
	whole := encoded(large)
	cases := []struct {
		name    string
		wire    []byte
		want    *pb.ModelInferRequest
		aliased bool
	}{
		{"small, grpc-go's path", encoded(small), small, false},
		{"large", whole, large, true},
		{"large, raw entries first", reordered, large, true},
		{"large, truncated", whole[:len(whole)-2], nil, false},
	}
	codec := newTensorCodec(nil)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got pb.ModelInferRequest
			err := codec.Unmarshal(frames(c.wire), &got)
			if c.want == nil {
				wantErr := proto.Unmarshal(c.wire, &pb.ModelInferRequest{})
				if err == nil || wantErr == nil || err.Error() != wantErr.Error() {
					t.Fatalf("error %v, want protobuf's %v", err, wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(&got, c.want) {
				t.Fatalf("decoded %v, want %v", &got, c.want)
			}
			if c.aliased {
				// Both entries lie in one buffer, the one joined copy.
				a, b := got.RawInputContents[0], got.RawInputContents[1]
				gap := uintptr(unsafe.Pointer(&b[0])) - uintptr(unsafe.Pointer(&a[0]))
				if gap < uintptr(len(a)) || gap > uintptr(len(c.wire)) {
					t.Errorf("the raw entries are %d bytes apart: not cut from one buffer", gap)
				}
			}
		})
	}
}

func TestTensorCodecResponse(t *testing.T) {
	cases := []struct {
		name string
		raw  [][]byte
	}{
		{"small, grpc-go's path", [][]byte{pattern(64, 1), pattern(64, 2)}},
		{"large", [][]byte{pattern(1<<18, 3), {}, pattern(5, 4)}},
	}
	codec := newTensorCodec(nil)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := &pb.ModelInferResponse{
				ModelName: "m", ModelVersion: "1", Id: "x",
				Outputs:           []*pb.ModelInferResponse_InferOutputTensor{{Name: "O", Datatype: "BYTES", Shape: []int64{1}}},
				RawOutputContents: c.raw,
			}
			out, err := codec.Marshal(resp)
			if err != nil {
				t.Fatal(err)
			}
			wire := out.Materialize()
			var got pb.ModelInferResponse
			if err := proto.Unmarshal(wire, &got); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(&got, resp) {
				t.Fatalf("decoded %v, want %v", &got, resp)
			}
			if want, _ := proto.Marshal(resp); len(wire) != len(want) {
				t.Errorf("%d bytes on the wire, protobuf's encoding has %d", len(wire), len(want))
			}
			if len(resp.RawOutputContents) != len(c.raw) || !bytes.Equal(resp.RawOutputContents[0], c.raw[0]) {
				t.Errorf("Marshal changed the response")
			}
		})
	}
}
