package server

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/stubvisor/stubvisor/backendapi"
	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

// The wire numbers of the tensor bytes in the KServe v2 messages.
const (
	rawInputField  protowire.Number = 7 // ModelInferRequest.raw_input_contents
	rawOutputField protowire.Number = 6 // ModelInferResponse.raw_output_contents
)

// tensorCodecMin is the message size from which tensorCodec takes its own
// path: below it, one more copy of the bytes costs less than the work
// of avoiding it.
const tensorCodecMin = 64 << 10

// tensorCodec is the server's gRPC codec: protobuf, as grpc-go's own, but
// without copying tensor bytes through the Go heap twice.
//
// A received ModelInferRequest arrives as the transport's frames. grpc-go's
// codec joins them into one buffer and then protobuf copies every
// raw_input_contents entry out of it (generated code never aliases bytes
// fields). Here the joined buffer is the only copy: the entries are cut
// out of it as they are, and protobuf decodes only the rest.
//
// A ModelInferResponse's raw_output_contents go to the transport as
// buffers of their own after the encoding of the rest, instead of being
// copied into one encoding first.
//
// When the backend lends input memory (backendapi.InputBuffers), the
// entries are instead copied from the frames straight into it
// (stageInferRequest), and the frames are never joined.
type tensorCodec struct {
	proto   encoding.CodecV2 // grpc-go's, for every other message
	buffers backendapi.InputBuffers
}

// newTensorCodec returns the codec for a server of backend b.
func newTensorCodec(b backendapi.Backend) tensorCodec {
	c := tensorCodec{proto: encoding.GetCodecV2("proto")}
	c.buffers, _ = b.(backendapi.InputBuffers)
	return c
}

func (tensorCodec) Name() string { return "proto" }

func (c tensorCodec) Marshal(v any) (mem.BufferSlice, error) {
	resp, ok := v.(*pb.ModelInferResponse)
	if !ok {
		return c.proto.Marshal(v)
	}
	raw := resp.RawOutputContents
	total := 0
	for _, r := range raw {
		total += len(r)
	}
	if total < tensorCodecMin {
		return c.proto.Marshal(v)
	}
	resp.RawOutputContents = nil
	head, err := proto.Marshal(resp)
	resp.RawOutputContents = raw
	if err != nil {
		return nil, err
	}
	// Each entry is its tag and length, then its bytes: the prefixes
	// share one small buffer, the bytes are the response's own.
	prefixes := make([]byte, 0, len(raw)*(1+binaryLenMax))
	out := make(mem.BufferSlice, 0, 1+2*len(raw))
	out = append(out, mem.SliceBuffer(head))
	for _, r := range raw {
		at := len(prefixes)
		prefixes = protowire.AppendTag(prefixes, rawOutputField, protowire.BytesType)
		prefixes = protowire.AppendVarint(prefixes, uint64(len(r)))
		out = append(out, mem.SliceBuffer(prefixes[at:len(prefixes):len(prefixes)]))
		if len(r) > 0 {
			out = append(out, outputBuffer(r))
		}
	}
	return out, nil
}

// binaryLenMax is the longest varint: a length prefix's bound.
const binaryLenMax = 10

func (c tensorCodec) Unmarshal(data mem.BufferSlice, v any) error {
	req, ok := v.(*pb.ModelInferRequest)
	if !ok || data.Len() < tensorCodecMin {
		return c.proto.Unmarshal(data, v)
	}
	if c.buffers != nil && stageInferRequest(data, req, c.buffers) == nil {
		return nil
	}
	return unmarshalInferRequest(data.Materialize(), req)
}

// unmarshalInferRequest decodes buf into req with every raw_input_contents
// entry aliasing buf; req owns buf from here on. A malformed buf gets
// protobuf's own error.
func unmarshalInferRequest(buf []byte, req *pb.ModelInferRequest) error {
	var raw [][]byte
	rest := make([]byte, 0, 512)
	for b := buf; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return proto.Unmarshal(buf, req)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return proto.Unmarshal(buf, req)
		}
		if num == rawInputField && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b[n:])
			raw = append(raw, v[:len(v):len(v)])
		} else {
			rest = append(rest, b[:n+m]...)
		}
		b = b[n+m:]
	}
	if err := proto.Unmarshal(rest, req); err != nil {
		return err
	}
	req.RawInputContents = raw
	return nil
}
