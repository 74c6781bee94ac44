package sched

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/supervisor/stubproc"
)

// These tests cover what the sequence batcher decides before any stub is
// involved: the control tensors it injects and the requests it refuses.
// Routing, order, reclaim and stub death run end to end against real stubs
// in cmd/stubvisor/e2e_sequence_test.go.

func TestCorrIDBytes(t *testing.T) {
	u64 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	u32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	str := func(s string) []byte { return append(u32(uint32(len(s))), s...) }
	tests := []struct {
		name    string
		id      backendapi.CorrelationID
		dt      backendapi.DataType
		want    []byte
		wantErr string
	}{
		{"uint64", backendapi.CorrelationID{Uint: math.MaxUint64}, backendapi.TypeUint64, u64(math.MaxUint64), ""},
		{"int64", backendapi.CorrelationID{Uint: 7}, backendapi.TypeInt64, u64(7), ""},
		{"uint32", backendapi.CorrelationID{Uint: 9}, backendapi.TypeUint32, u32(9), ""},
		{"int32 too large", backendapi.CorrelationID{Uint: 1 << 40}, backendapi.TypeInt32, nil, "does not fit"},
		{"string id as STRING", backendapi.CorrelationID{IsText: true, String: "abc"}, backendapi.TypeBytes, str("abc"), ""},
		{"uint id as STRING", backendapi.CorrelationID{Uint: 42}, backendapi.TypeBytes, str("42"), ""},
		{"string id as UINT64", backendapi.CorrelationID{IsText: true, String: "abc"}, backendapi.TypeUint64, nil, "string correlation ID 'abc' given"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := corrIDBytes(tc.id, tc.dt)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Errorf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// sequenceModel is a model version with a sequence batcher and no
// instances: a started sequence waits in the backlog.
func sequenceModel(t *testing.T, maxBatch int64) (*testModel, *sequenceBatcher) {
	t.Helper()
	sb := &inferencepb.ModelSequenceBatching{
		MaxSequenceIdleMicroseconds: uint64(time.Hour / time.Microsecond),
		ControlInput: []*inferencepb.ModelSequenceBatching_ControlInput{
			{Name: "S", Control: []*inferencepb.ModelSequenceBatching_Control{{Kind: inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_START, Int32FalseTrue: []int32{0, 1}}}},
			{Name: "E", Control: []*inferencepb.ModelSequenceBatching_Control{{Kind: inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_END, Fp32FalseTrue: []float32{0, 1}}}},
			{Name: "R", Control: []*inferencepb.ModelSequenceBatching_Control{{Kind: inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_READY, BoolFalseTrue: []bool{false, true}}}},
			{Name: "C", Control: []*inferencepb.ModelSequenceBatching_Control{{Kind: inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_CORRID, DataType: inferencepb.DataType_TYPE_UINT64}}},
		},
	}
	mv := &testModel{queue: make(chan *stubproc.Batch)}
	s, err := newSequenceBatcher(mv.schedModel(maxBatch), sb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return mv, s
}

func seqRequest(t *testing.T, mv *testModel, s *sequenceBatcher, id uint64, flags uint32, batch int64) (*stubproc.Request, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	pr := stubproc.NewRequest(ctx, &backendapi.InferRequest{ModelName: "m", CorrelationID: backendapi.CorrelationID{Uint: id}, Flags: flags}, batch, nil, false)
	mv.active.Add(1)
	if err := s.Enqueue(pr); err != nil {
		mv.active.Done()
		return nil, err
	}
	return pr, nil
}

func TestSequenceControlInputs(t *testing.T) {
	mv, s := sequenceModel(t, 4)
	pr, err := seqRequest(t, mv, s, 99, backendapi.FlagSequenceStart, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		dt   backendapi.DataType
		data []byte
	}{
		"S": {backendapi.TypeInt32, binary.LittleEndian.AppendUint32(nil, 1)},
		"E": {backendapi.TypeFP32, binary.LittleEndian.AppendUint32(nil, math.Float32bits(0))},
		"R": {backendapi.TypeBool, []byte{1}},
		"C": {backendapi.TypeUint64, binary.LittleEndian.AppendUint64(nil, 99)},
	}
	for _, in := range pr.Req().Inputs {
		w, ok := want[in.Name]
		if !ok {
			t.Errorf("unexpected input %s", in.Name)
			continue
		}
		if in.DataType != w.dt || !bytes.Equal(in.Data, w.data) || !slices.Equal(in.Shape, []int64{1, 1}) {
			t.Errorf("%s = %s %v %v, want %s %v [1 1]", in.Name, in.DataType, in.Shape, in.Data, w.dt, w.data)
		}
		delete(want, in.Name)
	}
	if len(want) > 0 {
		t.Errorf("control inputs missing: %v", want)
	}
}

func TestSequenceRefusals(t *testing.T) {
	mv, s := sequenceModel(t, 4)
	if _, err := seqRequest(t, mv, s, 5, backendapi.FlagSequenceStart|backendapi.FlagSequenceEnd, 1); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		id    uint64
		flags uint32
		batch int64
		want  string
	}{
		{"no correlation id", 0, backendapi.FlagSequenceStart, 1, "inference request to model 'm' must specify a non-zero or non-empty correlation ID"},
		{"batch of two", 3, backendapi.FlagSequenceStart, 2, "inference request to model 'm' must specify batch-size 1 due to requirements of sequence batcher"},
		{"no START", 4, 0, 1, "inference request for sequence 4 to model 'm' must specify the START flag on the first request of the sequence"},
		{"after END", 5, 0, 1, "inference request for sequence 5 to model 'm' must specify the START flag on the first request of the sequence; the sequence ended with an earlier request that had the END flag"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := seqRequest(t, mv, s, tc.id, tc.flags, tc.batch)
			if want := backendapi.Errorf(backendapi.InvalidArg, "%s", tc.want); !sameError(err, want) {
				t.Errorf("got %v, want %v", err, want)
			}
		})
	}
}

func TestSequenceTombstonesAreBounded(t *testing.T) {
	_, s := sequenceModel(t, 0)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range tombstones + 10 {
		s.bury(seqKey{u: uint64(i)}, "ended")
	}
	if len(s.tomb) != tombstones || len(s.tombKeys) != tombstones {
		t.Errorf("%d tombstones (%d keys), want %d", len(s.tomb), len(s.tombKeys), tombstones)
	}
	if _, ok := s.tomb[seqKey{u: 0}]; ok {
		t.Error("the oldest tombstone survived")
	}
}

func TestSequenceFiller(t *testing.T) {
	mv, s := sequenceModel(t, 4)
	pr, err := seqRequest(t, mv, s, 99, backendapi.FlagSequenceStart, 1)
	if err != nil {
		t.Fatal(err)
	}
	pr.Req().Inputs = append(pr.Req().Inputs,
		backendapi.InputTensor{Name: "X", DataType: backendapi.TypeFP32, Shape: []int64{1, 3}, Data: make([]byte, 12)},
		backendapi.InputTensor{Name: "T", DataType: backendapi.TypeBytes, Shape: []int64{1, 2}, Data: []byte{1, 0, 0, 0, 'a', 0, 0, 0, 0}})
	f := s.filler(pr)
	if !f.Filler() || f.Req().CorrelationID != (backendapi.CorrelationID{}) || f.Req().Flags != 0 {
		t.Fatalf("filler = %+v", f.Req())
	}
	want := map[string][]byte{
		"S": binary.LittleEndian.AppendUint32(nil, 0),
		"E": binary.LittleEndian.AppendUint32(nil, math.Float32bits(0)),
		"R": {0},
		"C": make([]byte, 8),
		"X": make([]byte, 12),
		"T": make([]byte, 8), // two empty strings
	}
	for _, in := range f.Req().Inputs {
		w, ok := want[in.Name]
		if !ok || !bytes.Equal(in.Data, w) {
			t.Errorf("%s = %v, want %v", in.Name, in.Data, w)
		}
		delete(want, in.Name)
	}
	if len(want) > 0 {
		t.Errorf("filler lacks inputs %v", want)
	}
	// Its responses are dropped and it ends without a caller.
	mv.Finish(f, nil, nil, true)
	select {
	case <-f.Done():
	default:
		t.Error("finish did not end the filler")
	}
}

func TestSequenceImplicitStateRefused(t *testing.T) {
	mv := &testModel{}
	_, err := newSequenceBatcher(mv.schedModel(0), &inferencepb.ModelSequenceBatching{
		State: []*inferencepb.ModelSequenceBatching_State{{InputName: "IN_STATE", OutputName: "OUT_STATE"}},
	})
	if !errors.Is(err, backendapi.Unsupported) || !strings.Contains(err.Error(), "sequence_batching.state") {
		t.Errorf("err = %v, want an unsupported error naming sequence_batching.state", err)
	}
}
