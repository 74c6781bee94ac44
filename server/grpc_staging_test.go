package server

import (
	"bytes"
	"context"
	"testing"
	"unsafe"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/stubvisor/stubvisor/backendapi"
	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

// lender lends heap buffers for one model and counts those given back.
type lender struct {
	model string
	lent  []*backendapi.InputBuffer
	freed int
}

func (l *lender) InputBuffer(_ context.Context, model string, _ int64, n int) *backendapi.InputBuffer {
	if model != l.model {
		return nil
	}
	ib := backendapi.NewInputBuffer(make([]byte, n), nil, func() { l.freed++ })
	l.lent = append(l.lent, ib)
	return ib
}

func TestStageInferRequest(t *testing.T) {
	msg := &pb.ModelInferRequest{
		ModelName: "m", Id: "r1", ModelVersion: "2",
		Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "A", Datatype: "UINT8", Shape: []int64{100003}},
			{Name: "B", Datatype: "UINT8", Shape: []int64{3}},
			{Name: "C", Datatype: "UINT8", Shape: []int64{70000}},
		},
		RawInputContents: [][]byte{pattern(100003, 1), pattern(3, 9), pattern(70000, 4)},
	}
	wire, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	// Pieces of odd sizes, so that varints and entries straddle them.
	var data mem.BufferSlice
	for b, n := wire, 1; len(b) > 0; n = n*3 + 1 {
		k := min(len(b), n)
		data = append(data, mem.SliceBuffer(b[:k]))
		b = b[k:]
	}
	l := &lender{model: "m"}
	var req pb.ModelInferRequest
	if err := stageInferRequest(data, &req, l); err != nil {
		t.Fatal(err)
	}
	if len(l.lent) != 1 {
		t.Fatalf("%d buffers lent, want 1", len(l.lent))
	}
	ib := l.lent[0]
	got := req.RawInputContents
	req.RawInputContents = nil
	want := proto.Clone(msg).(*pb.ModelInferRequest)
	want.RawInputContents = nil
	if !proto.Equal(&req, want) {
		t.Errorf("fields: %v, want %v", &req, want)
	}
	for i, r := range got {
		at := ib.Offset(r)
		if !bytes.Equal(r, msg.RawInputContents[i]) || at < 0 || at%blockAlign != 0 {
			t.Errorf("raw input %d: at %d of the lent buffer, equal %v", i, at, bytes.Equal(r, msg.RawInputContents[i]))
		}
	}
	req.RawInputContents = got
	if taken := takeStaged(&req); taken != ib || takeStaged(&req) != nil {
		t.Fatalf("takeStaged: %p then again, want %p once", taken, ib)
	}
	ib.Release()
	if l.freed != 1 {
		t.Errorf("buffer freed %d times, want 1", l.freed)
	}

	// Another model's message, and a malformed one, take the usual path.
	other := proto.Clone(msg).(*pb.ModelInferRequest)
	other.ModelName = "n"
	wire2, _ := proto.Marshal(other)
	for name, w := range map[string][]byte{"no buffer": wire2, "cut short": wire[:len(wire)-10]} {
		if err := stageInferRequest(mem.BufferSlice{mem.SliceBuffer(w)}, &req, l); err != errNotStaged {
			t.Errorf("%s: %v, want errNotStaged", name, err)
		}
	}
	if len(l.lent) != 1 {
		t.Errorf("%d buffers lent, want 1", len(l.lent))
	}
}

func TestReusePool(t *testing.T) {
	for _, n := range []int{0, 1, 256, 257, 16 << 10, 4 << 20, 16 << 20} {
		b := grpcPool.Get(n)
		if len(*b) != n || cap(*b) < n {
			t.Errorf("Get(%d): len %d cap %d", n, len(*b), cap(*b))
		}
		if c := cap(*b); c&(c-1) != 0 {
			t.Errorf("Get(%d): capacity %d is no class size", n, c)
		}
		grpcPool.Put(b)
	}
	if b := grpcPool.Get(16<<20 + 1); len(*b) != 16<<20+1 {
		t.Errorf("Get over the largest class: len %d", len(*b))
	}
	// A large output is copied into a pooled buffer, and Marshal hands
	// that buffer to the transport, which puts it back when done.
	out := &pb.ModelInferResponse{}
	data := pattern(1<<20, 3)
	out.RawOutputContents = [][]byte{pooledCopy(out, data)}
	if !bytes.Equal(out.RawOutputContents[0], data) {
		t.Fatal("pooled copy differs")
	}
	key := uintptr(unsafe.Pointer(unsafe.SliceData(out.RawOutputContents[0])))
	if _, ok := pooledOutputs.Load(key); !ok {
		t.Fatal("pooled copy not recorded for Marshal")
	}
	bs, err := newTensorCodec(nil).Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	var back pb.ModelInferResponse
	if err := proto.Unmarshal(bs.Materialize(), &back); err != nil || !bytes.Equal(back.RawOutputContents[0], data) {
		t.Fatalf("marshalled response: %v", err)
	}
	if _, ok := pooledOutputs.Load(key); ok {
		t.Error("Marshal left the pooled copy's entry: the transport would not put it back")
	}
	bs.Free()
}
