package server

import (
	"context"
	"errors"
	"io"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/stubvisor/stubvisor/backendapi"
	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

// stagedInputs maps the first byte of a request's raw inputs, which
// tensorCodec read into a buffer the backend lent (backendapi.InputBuffers),
// to that buffer, until the handler takes it (takeStaged). A request the
// handler never sees (refused by an interceptor) gives its buffer back when
// it is collected.
var stagedInputs sync.Map // uintptr -> *backendapi.InputBuffer

// errNotStaged makes stageInferRequest leave a message to the usual path.
var errNotStaged = errors.New("not staged")

// stageInferRequest decodes a ModelInferRequest from the transport's frames
// with its raw_input_contents copied straight from the frames into a
// buffer the backend lends for the model named in the message, each entry
// at a block-aligned place so that the model reads them in place: one copy,
// instead of joining the frames and copying the entries again into the
// stub's memory. It fails with errNotStaged, leaving data as it was, for a
// message it cannot read this way (the usual path then reports protobuf's
// own error) or whose model has no buffer to lend.
func stageInferRequest(data mem.BufferSlice, req *pb.ModelInferRequest, b backendapi.InputBuffers) error {
	type entry struct{ at, n int }
	var raws []entry
	rest := make([]byte, 0, 512)
	rd := data.Reader()
	total := rd.Remaining()
	for rd.Remaining() > 0 {
		tag, err := readUvarint(rd)
		if err != nil {
			_ = rd.Close()
			return errNotStaged
		}
		num, typ := protowire.DecodeTag(tag)
		if num == rawInputField && typ == protowire.BytesType {
			n, err := readUvarint(rd)
			if err != nil || n > uint64(rd.Remaining()) {
				_ = rd.Close()
				return errNotStaged
			}
			raws = append(raws, entry{total - rd.Remaining(), int(n)})
			_, _ = rd.Discard(int(n))
			continue
		}
		rest = protowire.AppendVarint(rest, tag)
		if rest, err = appendFieldValue(rest, typ, rd); err != nil {
			_ = rd.Close()
			return errNotStaged
		}
	}
	_ = rd.Close()
	if err := proto.Unmarshal(rest, req); err != nil {
		return errNotStaged
	}
	version, err := parseModelVersion(req.GetModelVersion())
	if err != nil {
		return errNotStaged
	}
	size := 0
	for _, e := range raws {
		size += (e.n + blockAlign - 1) &^ (blockAlign - 1)
	}
	ib := b.InputBuffer(context.Background(), req.GetModelName(), version, size)
	if ib == nil {
		return errNotStaged
	}
	req.RawInputContents = make([][]byte, len(raws))
	rd = data.Reader()
	defer rd.Close()
	pos, dst := 0, 0
	for i, e := range raws {
		_, _ = rd.Discard(e.at - pos)
		v := ib.Data[dst : dst+e.n : dst+e.n]
		_, _ = io.ReadFull(rd, v)
		req.RawInputContents[i] = v
		pos = e.at + e.n
		dst += (e.n + blockAlign - 1) &^ (blockAlign - 1)
	}
	if len(raws) > 0 && raws[0].n > 0 {
		key := uintptr(unsafe.Pointer(unsafe.SliceData(req.RawInputContents[0])))
		stagedInputs.Store(key, ib)
		runtime.AddCleanup(req, func(ib *backendapi.InputBuffer) {
			stagedInputs.CompareAndDelete(key, ib)
			ib.Release()
		}, ib)
	} else {
		ib.Release()
	}
	return nil
}

// blockAlign is where tensorCodec places each raw input in a lent buffer:
// the arena's block alignment, which the backend needs to use an input in
// place.
const blockAlign = 64

// takeStaged returns the buffer req's raw inputs were read into, or nil;
// the caller releases it once the request is done.
func takeStaged(req *pb.ModelInferRequest) *backendapi.InputBuffer {
	raw := req.GetRawInputContents()
	if len(raw) == 0 || len(raw[0]) == 0 {
		return nil
	}
	v, ok := stagedInputs.LoadAndDelete(uintptr(unsafe.Pointer(unsafe.SliceData(raw[0]))))
	if !ok {
		return nil
	}
	return v.(*backendapi.InputBuffer)
}

// readUvarint reads one protobuf varint.
func readUvarint(rd *mem.Reader) (uint64, error) {
	var v uint64
	for shift := uint(0); shift < 64; shift += 7 {
		c, err := rd.ReadByte()
		if err != nil {
			return 0, err
		}
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, nil
		}
	}
	return 0, errNotStaged
}

// appendFieldValue copies one field value of wire type typ from rd to dst.
func appendFieldValue(dst []byte, typ protowire.Type, rd *mem.Reader) ([]byte, error) {
	n := 0
	switch typ {
	case protowire.VarintType:
		v, err := readUvarint(rd)
		return protowire.AppendVarint(dst, v), err
	case protowire.Fixed32Type:
		n = 4
	case protowire.Fixed64Type:
		n = 8
	case protowire.BytesType:
		l, err := readUvarint(rd)
		if err != nil || l > uint64(rd.Remaining()) {
			return dst, errNotStaged
		}
		dst = protowire.AppendVarint(dst, l)
		n = int(l)
	default:
		return dst, errNotStaged
	}
	if n > rd.Remaining() {
		return dst, errNotStaged
	}
	at := len(dst)
	dst = slices.Grow(dst, n)[:at+n]
	_, err := io.ReadFull(rd, dst[at:])
	return dst, err
}
