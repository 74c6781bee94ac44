package sched

// What the sequence batcher adds to a request: the control inputs a model
// declares (START, END, READY, CORRID) and the key of its sequence.

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

// seqKey identifies a sequence; uint64 and string ids never collide.
type seqKey struct {
	text bool
	u    uint64
	s    string
}

func keyOf(id backendapi.CorrelationID) seqKey {
	if id.IsText {
		return seqKey{text: true, s: id.String}
	}
	return seqKey{u: id.Uint}
}

func (k seqKey) String() string {
	if k.text {
		return k.s
	}
	return strconv.FormatUint(k.u, 10)
}

// seqControl is one control input the batcher injects.
type seqControl struct {
	name  string
	kind  inferencepb.ModelSequenceBatching_Control_Kind
	dtype backendapi.DataType
	// off and on are the encoded false and true values (START, END, READY).
	off, on []byte
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// controlInputs builds the control tensors of one request. A zero id
// (a filler's) is encoded as zero bytes: 0, or the empty string.
func (s *sequenceBatcher) controlInputs(id backendapi.CorrelationID, start, end, ready bool) ([]backendapi.InputTensor, error) {
	out := make([]backendapi.InputTensor, 0, len(s.controls))
	for _, c := range s.controls {
		t := backendapi.InputTensor{Name: c.name, DataType: c.dtype, Shape: s.ctrlShape}
		switch c.kind {
		case inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_START:
			t.Data = pick(start, c)
		case inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_END:
			t.Data = pick(end, c)
		case inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_READY:
			t.Data = pick(ready, c)
		case inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_CORRID:
			if id.IsZero() {
				t.Data = make([]byte, max(c.dtype.Size(), 4))
				break
			}
			data, err := corrIDBytes(id, c.dtype)
			if err != nil {
				return nil, backendapi.Errorf(backendapi.InvalidArg, "inference request to model '%s': %v", s.mv.name, err)
			}
			t.Data = data
		default:
			continue
		}
		out = append(out, t)
	}
	return out, nil
}

func pick(v bool, c seqControl) []byte {
	if v {
		return c.on
	}
	return c.off
}

// corrIDBytes encodes a correlation id as the CORRID control's data type.
func corrIDBytes(id backendapi.CorrelationID, dt backendapi.DataType) ([]byte, error) {
	if dt == backendapi.TypeBytes {
		s := id.String
		if !id.IsText {
			s = strconv.FormatUint(id.Uint, 10)
		}
		return append(binary.LittleEndian.AppendUint32(nil, uint32(len(s))), s...), nil
	}
	if id.IsText {
		return nil, fmt.Errorf("string correlation ID '%s' given, but the CORRID control input has data type %s", id.String, dt)
	}
	switch dt {
	case backendapi.TypeUint64, backendapi.TypeInt64:
		return binary.LittleEndian.AppendUint64(nil, id.Uint), nil
	case backendapi.TypeUint32, backendapi.TypeInt32:
		if id.Uint > math.MaxUint32 {
			return nil, fmt.Errorf("correlation ID %d does not fit the CORRID control input's data type %s", id.Uint, dt)
		}
		return binary.LittleEndian.AppendUint32(nil, uint32(id.Uint)), nil
	}
	return nil, fmt.Errorf("CORRID control input has unsupported data type %s", dt)
}

// newID picks a correlation id for an iterative sequence that came
// without one, as Triton does: the next number no live sequence uses.
// Called with s.mu held.
func (s *sequenceBatcher) newID() backendapi.CorrelationID {
	for {
		s.lastID++
		id := backendapi.CorrelationID{Uint: s.lastID}
		if _, live := s.seqs[keyOf(id)]; !live && !id.IsZero() {
			return id
		}
	}
}

// configType is the data type of a config's CORRID control.
func configType(t inferencepb.DataType) backendapi.DataType {
	return backendapi.ParseDataType(t.String())
}

// elementCount returns the number of elements of shape.
func elementCount(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}
