package respcache

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"math"
	"slices"

	"github.com/stubvisor/stubvisor/backendapi"
)

// Key identifies a request's response: a SHA-256 over what decides it.
type Key [sha256.Size]byte

// Source returns the bytes of an input held in client shared memory
// (in.SharedMemory is set). The bytes are only read during KeyOf.
type Source func(in *backendapi.InputTensor) ([]byte, error)

// KeyOf computes the key of req for the model version it runs on (req's
// ModelVersion may be 0, "the latest"; version is the one chosen). shm
// reads inputs in client shared memory; it may be nil when none is.
func KeyOf(req *backendapi.InferRequest, version int64, shm Source) (Key, error) {
	h := sha256.New()
	w := keyWriter{h: h}
	w.str(req.ModelName)
	w.u64(uint64(version))
	w.u64(uint64(len(req.Inputs)))
	for i := range req.Inputs {
		in := &req.Inputs[i]
		w.str(in.Name)
		w.str(in.DataType.String())
		w.u64(uint64(len(in.Shape)))
		for _, d := range in.Shape {
			w.u64(uint64(d))
		}
		data := in.Data
		if in.SharedMemory != nil {
			if shm == nil {
				return Key{}, fmt.Errorf("respcache: key: input '%s' is in shared memory and no source reads it", in.Name)
			}
			var err error
			if data, err = shm(in); err != nil {
				return Key{}, fmt.Errorf("respcache: key: input '%s': %w", in.Name, err)
			}
		}
		w.bytes(data)
	}
	w.u64(uint64(len(req.Outputs)))
	for _, o := range req.Outputs {
		w.str(o.Name)
		w.u64(uint64(o.Classification))
	}
	keys := make([]string, 0, len(req.Parameters))
	for k := range req.Parameters {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	w.u64(uint64(len(keys)))
	for _, k := range keys {
		w.str(k)
		if err := w.value(req.Parameters[k]); err != nil {
			return Key{}, fmt.Errorf("respcache: key: parameter '%s': %w", k, err)
		}
	}
	var key Key
	h.Sum(key[:0])
	return key, nil
}

// keyWriter writes length-prefixed fields, so that no two different
// requests write the same stream.
type keyWriter struct {
	h   hash.Hash
	buf [9]byte
}

func (w *keyWriter) u64(v uint64) {
	binary.LittleEndian.PutUint64(w.buf[:8], v)
	w.h.Write(w.buf[:8])
}

func (w *keyWriter) str(s string) {
	w.u64(uint64(len(s)))
	w.h.Write([]byte(s))
}

func (w *keyWriter) bytes(b []byte) {
	w.u64(uint64(len(b)))
	w.h.Write(b)
}

// value writes a parameter value with its type, so that "1", 1 and true
// are different keys, as they are different parameters to the model.
func (w *keyWriter) value(v any) error {
	switch x := v.(type) {
	case string:
		w.h.Write([]byte{'s'})
		w.str(x)
	case int64:
		w.h.Write([]byte{'i'})
		w.u64(uint64(x))
	case int:
		w.h.Write([]byte{'i'})
		w.u64(uint64(x))
	case uint64:
		w.h.Write([]byte{'u'})
		w.u64(x)
	case float64:
		w.h.Write([]byte{'f'})
		w.u64(math.Float64bits(x))
	case bool:
		w.h.Write([]byte{'b'})
		if x {
			w.u64(1)
		} else {
			w.u64(0)
		}
	default:
		return fmt.Errorf("unsupported value type %T", v)
	}
	return nil
}
