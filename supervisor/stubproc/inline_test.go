package stubproc

import (
	"bytes"
	"context"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc"
)

// prepStub is a Proc with a region and no process: enough for prepare
// and freeInputs.
func prepStub(t *testing.T) *Proc {
	t.Helper()
	s := ipc.DefaultSettings()
	s.Pool.DefaultBytes, s.Pool.GrowthBytes, s.Pool.MaxBytes = 1<<20, 1<<20, 16<<20
	conn, err := ipc.Create("supervisor-prepare-test", s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &Proc{conn: conn, log: hclog.NewNullLogger(), exited: make(chan struct{}),
		cfg: Config{Instance: "m_0_0", Model: "m"}}
}

func filled(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i%251)
	}
	return b
}

func inUse(p *Proc) uint64 {
	own, _ := p.conn.Usage()
	return own.InUse
}

// Inputs of at most ipc.InlineMax bytes travel in the Execute message, as
// copies of the request's bytes (the caller may leave before it is sent);
// larger ones take a block of the supervisor's arena, freed with the
// request.
func TestPrepareSendsSmallInputsInline(t *testing.T) {
	p := prepStub(t)
	small, edge, big := filled(64, 1), filled(ipc.InlineMax, 2), filled(ipc.InlineMax+1, 3)
	req := &backendapi.InferRequest{ModelName: "m", Inputs: []backendapi.InputTensor{
		{Name: "SMALL", DataType: backendapi.TypeUint8, Shape: []int64{64}, Data: small},
		{Name: "EDGE", DataType: backendapi.TypeUint8, Shape: []int64{ipc.InlineMax}, Data: edge},
		{Name: "BIG", DataType: backendapi.TypeUint8, Shape: []int64{ipc.InlineMax + 1}, Data: big},
		{Name: "EMPTY", DataType: backendapi.TypeUint8, Shape: []int64{0}},
	}}
	pr := NewRequest(context.Background(), req, 1, nil, false)
	room := 1 << 20
	r, err := p.prepare(pr, &room)
	if err != nil {
		t.Fatal(err)
	}
	if want := 1<<20 - 64 - ipc.InlineMax; room != want {
		t.Errorf("inline room left %d, want %d", room, want)
	}
	wantLoc := []uint8{ipc.LocInline, ipc.LocInline, ipc.LocArena0, ipc.LocArena0}
	for i, in := range r.Inputs {
		if in.Loc != wantLoc[i] || in.Size != uint64(len(req.Inputs[i].Data)) {
			t.Errorf("input %s: loc %d size %d, want loc %d size %d", in.Name, in.Loc, in.Size, wantLoc[i], len(req.Inputs[i].Data))
		}
	}
	for i := range req.Inputs[:2] {
		want := bytes.Clone(req.Inputs[i].Data)
		clear(req.Inputs[i].Data) // the caller reuses its buffer
		if !bytes.Equal(r.Inputs[i].Data, want) {
			t.Errorf("input %s: the message's bytes changed with the request's", r.Inputs[i].Name)
		}
	}
	view, err := p.conn.View(ipc.LocArena0, r.Inputs[2].Offset, r.Inputs[2].Size)
	if err != nil || !bytes.Equal(view, big) {
		t.Fatalf("BIG in the arena: %v", err)
	}
	if len(pr.inputs) != 1 || pr.inputs[0] != r.Inputs[2].Offset {
		t.Fatalf("blocks to free %v, want only BIG's %d", pr.inputs, r.Inputs[2].Offset)
	}
	if inUse(p) == 0 {
		t.Fatal("no block in use for BIG")
	}
	p.freeInputs(pr)
	if n := inUse(p); n != 0 {
		t.Fatalf("%d bytes in use after freeInputs", n)
	}
}

// A batch's inline bytes are bounded (execute gives prepare a quarter of
// a frame): a request whose small inputs do not all fit in what is left
// sends every input through the arena.
func TestPrepareInlineRoomIsBounded(t *testing.T) {
	p := prepStub(t)
	req := &backendapi.InferRequest{ModelName: "m", Inputs: []backendapi.InputTensor{
		{Name: "A", DataType: backendapi.TypeUint8, Shape: []int64{600}, Data: filled(600, 1)},
		{Name: "B", DataType: backendapi.TypeUint8, Shape: []int64{600}, Data: filled(600, 2)},
	}}
	pr := NewRequest(context.Background(), req, 1, nil, false)
	room := 1000
	r, err := p.prepare(pr, &room)
	if err != nil {
		t.Fatal(err)
	}
	if room != 1000 {
		t.Errorf("room %d after a request that did not fit, want 1000", room)
	}
	for _, in := range r.Inputs {
		if in.Loc != ipc.LocArena0 || in.Data != nil {
			t.Errorf("input %s: loc %d, want the arena", in.Name, in.Loc)
		}
	}
	p.freeInputs(pr)
	if n := inUse(p); n != 0 {
		t.Fatalf("%d bytes in use after freeInputs", n)
	}
	if quarter := p.conn.MaxFrame() / 4; quarter < 2*ipc.InlineMax {
		t.Fatalf("a default ring's quarter frame (%d bytes) holds less than two inline inputs", quarter)
	}
}
