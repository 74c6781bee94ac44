package ipc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/vmihailenco/msgpack/v5"
)

// The codec is written by hand over byte slices for the fixed shapes of
// messages.go: no reflection, no interface calls per element, and every
// length checked against the bytes that are left before anything is
// allocated, so a hostile frame costs at most its own size. Free-form
// values (Initialize options, a Result's value) are encoded with the
// msgpack library and decoded by anyValue, with a depth cap.

// maxDepth bounds the nesting of a free-form value.
const maxDepth = 16

// Encoder turns messages into frame payloads, reusing one buffer. It is
// not safe for concurrent use.
type Encoder struct{ encoder }

// NewEncoder returns an Encoder.
func NewEncoder() *Encoder {
	e := &Encoder{}
	e.init()
	return e
}

// Encode returns m's encoding; the slice is valid until the next call.
func (e *Encoder) Encode(m Message) ([]byte, error) { return e.encode(m) }

// Decoder turns frame payloads into messages. It is not safe for
// concurrent use.
type Decoder struct{ decoder }

// NewDecoder returns a Decoder.
func NewDecoder() *Decoder { return &Decoder{} }

// Decode decodes one frame payload. It never panics; anything malformed
// wraps ErrProtocol.
func (d *Decoder) Decode(b []byte) (Message, error) { return d.decode(b) }

// Decode decodes one frame payload (see Decoder.Decode).
func Decode(b []byte) (Message, error) {
	var d decoder
	return d.decode(b)
}

type encoder struct {
	b    []byte
	anyb bytes.Buffer
	anye *msgpack.Encoder
}

func (e *encoder) init() {
	e.b = make([]byte, 0, 512)
}

func (e *encoder) encode(m Message) ([]byte, error) {
	b, err := e.message(e.b[:0], m)
	if err != nil {
		return nil, fmt.Errorf("ipc: encode %T: %w", m, err)
	}
	if cap(b) <= 1<<20 {
		e.b = b // keep the grown buffer, unless one huge message grew it
	}
	return b, nil
}

func (e *encoder) message(b []byte, m Message) ([]byte, error) {
	var err error
	switch m := m.(type) {
	case *InitializeMsg:
		b = appendStringMap(appendHead(b, 4, KindInitialize, m.ID), m.Args)
		return e.appendAny(b, m.Options)
	case *ExecuteMsg:
		b = appendHead(b, 3, KindExecute, m.BatchID)
		b = appendArrayLen(b, len(m.Requests))
		for i := range m.Requests {
			if b, err = appendRequest(b, &m.Requests[i]); err != nil {
				return nil, err
			}
		}
		return b, nil
	case *FinalizeMsg:
		return appendHead(b, 2, KindFinalize, m.ID), nil
	case *ReleaseMsg:
		return appendUint64s(appendHead(b, 3, KindRelease, 0), m.Offsets), nil
	case *CancelMsg:
		return appendHead(b, 2, KindCancel, m.Handle), nil
	case *IsReadyMsg:
		return appendHead(b, 2, KindIsReady, m.ID), nil
	case *CollectMetricsMsg:
		return appendHead(b, 2, KindCollectMetrics, m.ID), nil
	case *AutoCompleteMsg:
		b = appendHead(b, 4, KindAutoComplete, m.ID)
		if b, err = e.appendAny(b, m.Options); err != nil {
			return nil, err
		}
		return appendString(b, m.ConfigJSON), nil
	case *InferResultMsg:
		return appendResponse(appendHead(b, 3, KindInferResult, m.ID), &m.Response), nil
	case *MapRegionMsg:
		if m.CUDAHandle != nil {
			b = appendUint(appendHead(b, 7, KindMapRegion, 0), m.RegionID)
			b = appendUint(appendUint(b, m.Offset), m.Size)
			return appendInt(appendBin(b, m.CUDAHandle), m.DeviceID), nil
		}
		b = appendUint(appendHead(b, 5, KindMapRegion, 0), m.RegionID)
		return appendUint(appendUint(b, m.Offset), m.Size), nil
	case *UnmapRegionMsg:
		return appendUint(appendHead(b, 3, KindUnmapRegion, 0), m.RegionID), nil
	case *HelloMsg:
		b = appendHead(b, 5, KindHello, 0)
		b = appendInt(appendInt(b, m.Version), m.PID)
		return appendStringMap(b, m.Info), nil
	case *ResultMsg:
		b = appendError(appendHead(b, 4, KindResult, m.ID), m.Error)
		return e.appendAny(b, m.Value)
	case *ResponseMsg:
		return appendResponse(appendHead(b, 3, KindResponse, 0), &m.Response), nil
	case *ExecuteDoneMsg:
		n := 4
		if len(m.Rescheduled) > 0 {
			n = 5
		}
		b = appendError(appendHead(b, n, KindExecuteDone, m.BatchID), m.Error)
		b = appendArrayLen(b, len(m.Responses))
		for i := range m.Responses {
			b = appendResponse(b, &m.Responses[i])
		}
		if n == 5 {
			b = appendUint64s(b, m.Rescheduled)
		}
		return b, nil
	case *LogMsg:
		b = appendHead(b, 6, KindLog, 0)
		b = appendString(appendString(appendString(b, m.Level), m.Message), m.File)
		return appendInt(b, m.Line), nil
	case *InferExecMsg:
		b = appendHead(b, 6, KindInferExec, m.ID)
		b = appendInt(appendString(b, m.ModelName), m.ModelVersion)
		if b, err = appendRequest(b, &m.Request); err != nil {
			return nil, err
		}
		return appendBool(b, m.Decoupled), nil
	case *FreeMsg:
		return appendUint64s(appendHead(b, 3, KindFree, 0), m.Offsets), nil
	case *InferCancelMsg:
		return appendHead(b, 2, KindInferCancel, m.ID), nil
	case *ModelControlMsg:
		b = appendString(appendString(appendHead(b, 5, KindModelCtl, m.ID), m.Op), m.Model)
		return e.appendAny(b, m.Options)
	case *ControlResultMsg:
		b = appendError(appendHead(b, 4, KindControlResult, m.ID), m.Error)
		return e.appendAny(b, m.Value)
	case nil:
		return nil, errors.New("nil message")
	}
	return nil, fmt.Errorf("unknown message type %T", m)
}

// appendAny encodes a free-form value with the msgpack library (map keys
// sorted, so equal values give equal bytes).
func (e *encoder) appendAny(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return appendNil(b), nil
	case bool:
		return appendBool(b, v), nil
	case string:
		return appendString(b, v), nil
	}
	if e.anye == nil {
		e.anye = msgpack.NewEncoder(&e.anyb)
		e.anye.SetSortMapKeys(true)
		e.anye.UseCompactInts(true)
	}
	e.anyb.Reset()
	if err := e.anye.Encode(v); err != nil {
		return nil, err
	}
	return append(b, e.anyb.Bytes()...), nil
}

func appendHead(b []byte, n int, k Kind, id uint64) []byte {
	return appendUint(appendUint(appendArrayLen(b, n), uint64(k)), id)
}

func appendRequest(b []byte, r *Request) ([]byte, error) {
	switch {
	case r.TraceContext != "":
		b = appendArrayLen(b, 10)
	case len(r.OutputTargets) > 0:
		b = appendArrayLen(b, 9)
	default:
		b = appendArrayLen(b, 8)
	}
	b = appendString(appendUint(b, r.Handle), r.ID)
	switch c := r.CorrelationID.(type) {
	case nil:
		b = appendUint(b, 0)
	case uint64:
		b = appendUint(b, c)
	case string:
		b = appendString(b, c)
	case int:
		b = appendInt(b, int64(c))
	case int64:
		b = appendInt(b, c)
	case uint:
		b = appendUint(b, uint64(c))
	case uint32:
		b = appendUint(b, uint64(c))
	default:
		return nil, fmt.Errorf("correlation id of type %T (want uint64 or string)", c)
	}
	b = appendUint(b, uint64(r.Flags))
	b = appendArrayLen(b, len(r.Inputs))
	for i := range r.Inputs {
		b = appendTensor(b, &r.Inputs[i])
	}
	b = appendArrayLen(b, len(r.RequestedOutputs))
	for _, s := range r.RequestedOutputs {
		b = appendString(b, s)
	}
	b = appendUint(appendString(b, r.ParametersJSON), r.TimeoutMicros)
	if len(r.OutputTargets) > 0 {
		b = appendArrayLen(b, len(r.OutputTargets))
		for _, o := range r.OutputTargets {
			b = appendString(appendArrayLen(b, 4), o.Name)
			b = appendUint(appendUint(appendUint(b, o.RegionID), o.Offset), o.Size)
		}
	} else if r.TraceContext != "" {
		b = append(b, 0xc0) // nil: no output targets
	}
	if r.TraceContext != "" {
		b = appendString(b, r.TraceContext)
	}
	return b, nil
}

func appendTensor(b []byte, t *Tensor) []byte {
	if t.Loc == LocClient || t.Loc == LocCUDA || t.Loc == LocInline {
		b = appendArrayLen(b, 7)
	} else {
		b = appendArrayLen(b, 6)
	}
	b = appendUint(appendString(b, t.Name), uint64(t.DataType))
	b = appendArrayLen(b, len(t.Shape))
	for _, d := range t.Shape {
		b = appendInt(b, d)
	}
	b = appendUint(appendUint(appendUint(b, uint64(t.Loc)), t.Offset), t.Size)
	switch t.Loc {
	case LocClient, LocCUDA:
		b = appendUint(b, t.RegionID)
	case LocInline:
		b = appendBin(b, t.Data)
	}
	return b
}

func appendError(b []byte, e *Error) []byte {
	if e == nil {
		return appendNil(b)
	}
	return appendString(appendUint(appendArrayLen(b, 2), uint64(e.Code)), e.Message)
}

func appendResponse(b []byte, r *Response) []byte {
	b = appendArrayLen(b, 5)
	b = appendError(appendUint(appendUint(b, r.Handle), uint64(r.Flags)), r.Error)
	b = appendArrayLen(b, len(r.Outputs))
	for i := range r.Outputs {
		b = appendTensor(b, &r.Outputs[i])
	}
	return appendString(b, r.ParametersJSON)
}

// appendStringMap writes nil for a nil map, so decoding gives nil back,
// and sorts the keys, so equal maps give equal bytes (these maps are
// small and off the hot path).
func appendStringMap(b []byte, m map[string]string) []byte {
	if m == nil {
		return appendNil(b)
	}
	b = appendMapLen(b, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		b = appendString(appendString(b, k), m[k])
	}
	return b
}

func appendUint64s(b []byte, vs []uint64) []byte {
	b = appendArrayLen(b, len(vs))
	for _, v := range vs {
		b = appendUint(b, v)
	}
	return b
}

func appendNil(b []byte) []byte { return append(b, 0xc0) }

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 0xc3)
	}
	return append(b, 0xc2)
}

func appendUint(b []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
}

func appendInt(b []byte, v int64) []byte {
	switch {
	case v >= 0:
		return appendUint(b, uint64(v))
	case v >= -32:
		return append(b, byte(v))
	case v >= math.MinInt8:
		return append(b, 0xd0, byte(v))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(v))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(v))
}

func appendString(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n <= 31:
		b = append(b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

func appendBin(b []byte, v []byte) []byte {
	n := len(v)
	switch {
	case n <= math.MaxUint8:
		b = append(b, 0xc4, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xc5), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xc6), uint32(n))
	}
	return append(b, v...)
}

func appendArrayLen(b []byte, n int) []byte {
	switch {
	case n <= 15:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xdc), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdd), uint32(n))
}

func appendMapLen(b []byte, n int) []byte {
	switch {
	case n <= 15:
		return append(b, 0x80|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xde), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdf), uint32(n))
}

// decoder holds nothing between frames today; it is a type so the hot
// path can grow caches without changing callers.
type decoder struct{}

// errShort and friends are the decoding failures; they are wrapped with
// ErrProtocol and the message kind by decode.
var (
	errShort = errors.New("truncated")
	errType  = errors.New("unexpected type")
	errRange = errors.New("value out of range")
)

func (d *decoder) decode(b []byte) (m Message, err error) {
	r := reader{b: b}
	n, err := r.arrayLen()
	if err != nil {
		return nil, fmt.Errorf("ipc: decode envelope: %w: %w", ErrProtocol, err)
	}
	if n < 2 {
		return nil, fmt.Errorf("ipc: decode envelope: %d elements: %w", n, ErrProtocol)
	}
	k, err := r.uint(math.MaxUint8)
	if err != nil {
		return nil, fmt.Errorf("ipc: decode kind: %w: %w", ErrProtocol, err)
	}
	kind := Kind(k)
	id, err := r.uint(math.MaxUint64)
	if err != nil {
		return nil, fmt.Errorf("ipc: decode kind %d id: %w: %w", kind, ErrProtocol, err)
	}
	want := 0
	switch kind {
	case KindInitialize:
		want = 4
		if n >= want {
			v := &InitializeMsg{ID: id}
			if v.Args, err = r.stringMap(); err == nil {
				v.Options, err = r.anyMap()
			}
			m = v
		}
	case KindExecute:
		want = 3
		if n >= want {
			v := &ExecuteMsg{BatchID: id}
			v.Requests, err = r.requests()
			m = v
		}
	case KindFinalize:
		want, m = 2, &FinalizeMsg{ID: id}
	case KindRelease:
		want = 3
		if n >= want {
			v := &ReleaseMsg{}
			v.Offsets, err = r.uint64s()
			m = v
		}
	case KindCancel:
		want, m = 2, &CancelMsg{Handle: id}
	case KindIsReady:
		want, m = 2, &IsReadyMsg{ID: id}
	case KindCollectMetrics:
		want, m = 2, &CollectMetricsMsg{ID: id}
	case KindAutoComplete:
		want = 4
		if n >= want {
			v := &AutoCompleteMsg{ID: id}
			if v.Options, err = r.anyMap(); err == nil {
				v.ConfigJSON, err = r.str()
			}
			m = v
		}
	case KindInferResult:
		want = 3
		if n >= want {
			v := &InferResultMsg{ID: id}
			err = r.response(&v.Response)
			m = v
		}
	case KindMapRegion:
		want = 5
		if n >= want {
			v := &MapRegionMsg{}
			if v.RegionID, err = r.uint(math.MaxUint64); err == nil {
				if v.Offset, err = r.uint(math.MaxUint64); err == nil {
					v.Size, err = r.uint(math.MaxUint64)
				}
			}
			if err == nil && n >= 7 {
				var h []byte
				if h, err = r.rawStr(); err == nil {
					v.CUDAHandle = append([]byte{}, h...)
					v.DeviceID, err = r.int()
				}
				want = 7
			}
			m = v
		}
	case KindUnmapRegion:
		want = 3
		if n >= want {
			v := &UnmapRegionMsg{}
			v.RegionID, err = r.uint(math.MaxUint64)
			m = v
		}
	case KindHello:
		want = 5
		if n >= want {
			v := &HelloMsg{}
			if v.Version, err = r.int(); err == nil {
				if v.PID, err = r.int(); err == nil {
					v.Info, err = r.stringMap()
				}
			}
			m = v
		}
	case KindResult:
		want = 4
		if n >= want {
			v := &ResultMsg{ID: id}
			if v.Error, err = r.error(); err == nil {
				v.Value, err = r.anyValue(0)
			}
			m = v
		}
	case KindResponse:
		want = 3
		if n >= want {
			v := &ResponseMsg{}
			err = r.response(&v.Response)
			m = v
		}
	case KindExecuteDone:
		want = 4
		if n >= want {
			v := &ExecuteDoneMsg{BatchID: id}
			if v.Error, err = r.error(); err == nil {
				v.Responses, err = r.responses()
			}
			if err == nil && n >= 5 {
				v.Rescheduled, err = r.uint64s()
				want = 5
			}
			m = v
		}
	case KindLog:
		want = 6
		if n >= want {
			v := &LogMsg{}
			if v.Level, err = r.str(); err == nil {
				if v.Message, err = r.str(); err == nil {
					if v.File, err = r.str(); err == nil {
						v.Line, err = r.int()
					}
				}
			}
			m = v
		}
	case KindInferExec:
		want = 6
		if n >= want {
			v := &InferExecMsg{ID: id}
			if v.ModelName, err = r.str(); err == nil {
				if v.ModelVersion, err = r.int(); err == nil {
					if err = r.request(&v.Request); err == nil {
						v.Decoupled, err = r.bool()
					}
				}
			}
			m = v
		}
	case KindFree:
		want = 3
		if n >= want {
			v := &FreeMsg{}
			v.Offsets, err = r.uint64s()
			m = v
		}
	case KindInferCancel:
		want, m = 2, &InferCancelMsg{ID: id}
	case KindModelCtl:
		want = 5
		if n >= want {
			v := &ModelControlMsg{ID: id}
			if v.Op, err = r.str(); err == nil {
				if v.Model, err = r.str(); err == nil {
					v.Options, err = r.anyMap()
				}
			}
			m = v
		}
	case KindControlResult:
		want = 4
		if n >= want {
			v := &ControlResultMsg{ID: id}
			if v.Error, err = r.error(); err == nil {
				v.Value, err = r.anyValue(0)
			}
			m = v
		}
	default:
		return nil, fmt.Errorf("ipc: decode: unknown message kind %d: %w", kind, ErrProtocol)
	}
	if n < want {
		return nil, fmt.Errorf("ipc: decode kind %d: %d elements, want %d: %w", kind, n, want, ErrProtocol)
	}
	if err == nil {
		err = r.skip(n - want)
	}
	if err != nil {
		return nil, fmt.Errorf("ipc: decode kind %d: %w: %w", kind, ErrProtocol, err)
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("ipc: decode kind %d: %d trailing bytes: %w", kind, len(r.b), ErrProtocol)
	}
	return m, nil
}

// reader consumes msgpack from a byte slice. Every method checks lengths
// against what is left, so it never panics and never allocates more than
// the input could describe.
type reader struct{ b []byte }

func (r *reader) byte() (byte, error) {
	if len(r.b) == 0 {
		return 0, errShort
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c, nil
}

func (r *reader) take(n uint64) ([]byte, error) {
	if n > uint64(len(r.b)) {
		return nil, errShort
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v, nil
}

func (r *reader) be(n uint64) (uint64, error) {
	v, err := r.take(n)
	if err != nil {
		return 0, err
	}
	var x uint64
	for _, c := range v {
		x = x<<8 | uint64(c)
	}
	return x, nil
}

// container reads an array (map false) or map header, checking that the
// claimed elements can exist in the bytes left (each takes at least one).
func (r *reader) container(isMap bool) (int, error) {
	c, err := r.byte()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case !isMap && c&0xf0 == 0x90:
		n = uint64(c & 0x0f)
	case isMap && c&0xf0 == 0x80:
		n = uint64(c & 0x0f)
	case !isMap && c == 0xdc, isMap && c == 0xde:
		n, err = r.be(2)
	case !isMap && c == 0xdd, isMap && c == 0xdf:
		n, err = r.be(4)
	default:
		return 0, fmt.Errorf("%w: code %#x for %s", errType, c, map[bool]string{false: "array", true: "map"}[isMap])
	}
	if err != nil {
		return 0, err
	}
	per := uint64(1)
	if isMap {
		per = 2
	}
	if n > uint64(len(r.b))/per {
		return 0, fmt.Errorf("%w: %d elements in %d bytes", errShort, n, len(r.b))
	}
	return int(n), nil
}

func (r *reader) arrayLen() (int, error) { return r.container(false) }
func (r *reader) mapLen() (int, error)   { return r.container(true) }

// nil consumes a nil and reports whether there was one.
func (r *reader) nil() bool {
	if len(r.b) > 0 && r.b[0] == 0xc0 {
		r.b = r.b[1:]
		return true
	}
	return false
}

// integer reads any msgpack integer as a sign and a magnitude.
func (r *reader) integer() (neg bool, v uint64, err error) {
	c, err := r.byte()
	if err != nil {
		return false, 0, err
	}
	switch {
	case c <= 0x7f:
		return false, uint64(c), nil
	case c >= 0xe0:
		return true, uint64(-int64(int8(c))), nil
	case c >= 0xcc && c <= 0xcf:
		v, err = r.be(1 << (c - 0xcc))
		return false, v, err
	case c >= 0xd0 && c <= 0xd3:
		n := uint64(1) << (c - 0xd0)
		v, err = r.be(n)
		if err != nil {
			return false, 0, err
		}
		shift := 64 - 8*n
		s := int64(v<<shift) >> shift // sign-extend
		if s < 0 {
			return true, uint64(-s), nil // -MinInt64 wraps to 1<<63, still right as a magnitude
		}
		return false, uint64(s), nil
	}
	return false, 0, fmt.Errorf("%w: code %#x for an integer", errType, c)
}

func (r *reader) uint(limit uint64) (uint64, error) {
	neg, v, err := r.integer()
	if err != nil {
		return 0, err
	}
	if (neg && v != 0) || v > limit {
		return 0, errRange
	}
	return v, nil
}

func (r *reader) int() (int64, error) {
	neg, v, err := r.integer()
	if err != nil {
		return 0, err
	}
	if neg {
		if v > 1<<63 {
			return 0, errRange
		}
		return -int64(v), nil
	}
	if v > math.MaxInt64 {
		return 0, errRange
	}
	return int64(v), nil
}

func (r *reader) bool() (bool, error) {
	c, err := r.byte()
	switch {
	case err != nil:
		return false, err
	case c == 0xc2:
		return false, nil
	case c == 0xc3:
		return true, nil
	}
	return false, fmt.Errorf("%w: code %#x for a bool", errType, c)
}

// rawStr reads a str or bin (a peer may send either for text), or nil as
// empty.
func (r *reader) rawStr() ([]byte, error) {
	c, err := r.byte()
	if err != nil {
		return nil, err
	}
	var n uint64
	switch {
	case c&0xe0 == 0xa0:
		n = uint64(c & 0x1f)
	case c == 0xd9 || c == 0xc4:
		n, err = r.be(1)
	case c == 0xda || c == 0xc5:
		n, err = r.be(2)
	case c == 0xdb || c == 0xc6:
		n, err = r.be(4)
	case c == 0xc0:
		return nil, nil
	default:
		return nil, fmt.Errorf("%w: code %#x for a string", errType, c)
	}
	if err != nil {
		return nil, err
	}
	return r.take(n)
}

func (r *reader) str() (string, error) {
	b, err := r.rawStr()
	return string(b), err
}

func (r *reader) stringMap() (map[string]string, error) {
	if r.nil() {
		return nil, nil
	}
	n, err := r.mapLen()
	if err != nil {
		return nil, err
	}
	m := make(map[string]string, n)
	for range n {
		k, err := r.str()
		if err != nil {
			return nil, err
		}
		if m[k], err = r.str(); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (r *reader) anyMap() (map[string]any, error) {
	if r.nil() {
		return nil, nil
	}
	v, err := r.anyValue(0)
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: %T for a map", errType, v)
	}
	return m, nil
}

// anyValue decodes a free-form value: nil, bool, int64 (uint64 above
// MaxInt64), float64, string, []byte, []any or map[string]any (keys must
// be strings).
func (r *reader) anyValue(depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("%w: nested deeper than %d", errRange, maxDepth)
	}
	if len(r.b) == 0 {
		return nil, errShort
	}
	c := r.b[0]
	switch {
	case c == 0xc0:
		r.b = r.b[1:]
		return nil, nil
	case c == 0xc2 || c == 0xc3:
		return r.bool()
	case c <= 0x7f || c >= 0xe0 || (c >= 0xcc && c <= 0xd3):
		neg, v, err := r.integer()
		if err != nil {
			return nil, err
		}
		if neg {
			return -int64(v), nil // 1<<63 wraps to MinInt64 exactly
		}
		if v > math.MaxInt64 {
			return v, nil
		}
		return int64(v), nil
	case c == 0xca:
		r.b = r.b[1:]
		v, err := r.be(4)
		return float64(math.Float32frombits(uint32(v))), err
	case c == 0xcb:
		r.b = r.b[1:]
		v, err := r.be(8)
		return math.Float64frombits(v), err
	case c&0xe0 == 0xa0 || (c >= 0xd9 && c <= 0xdb):
		return r.str()
	case c >= 0xc4 && c <= 0xc6:
		b, err := r.rawStr()
		return bytes.Clone(b), err
	case c&0xf0 == 0x90 || c == 0xdc || c == 0xdd:
		n, err := r.arrayLen()
		if err != nil {
			return nil, err
		}
		s := make([]any, n)
		for i := range s {
			if s[i], err = r.anyValue(depth + 1); err != nil {
				return nil, err
			}
		}
		return s, nil
	case c&0xf0 == 0x80 || c == 0xde || c == 0xdf:
		n, err := r.mapLen()
		if err != nil {
			return nil, err
		}
		m := make(map[string]any, n)
		for range n {
			k, err := r.str()
			if err != nil {
				return nil, err
			}
			if m[k], err = r.anyValue(depth + 1); err != nil {
				return nil, err
			}
		}
		return m, nil
	}
	return nil, fmt.Errorf("%w: code %#x in a value", errType, c)
}

// skip consumes n whole values (the trailing elements a newer peer may
// add), iteratively so that nesting cannot exhaust the stack.
func (r *reader) skip(n int) error {
	for pending := uint64(n); pending > 0; pending-- {
		c, err := r.byte()
		if err != nil {
			return err
		}
		var size uint64
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		case c&0xf0 == 0x80:
			pending += 2 * uint64(c&0x0f)
		case c&0xf0 == 0x90:
			pending += uint64(c & 0x0f)
		case c&0xe0 == 0xa0:
			size = uint64(c & 0x1f)
		case c == 0xc4 || c == 0xd9:
			size, err = r.be(1)
		case c == 0xc5 || c == 0xda:
			size, err = r.be(2)
		case c == 0xc6 || c == 0xdb:
			size, err = r.be(4)
		case c == 0xc7, c == 0xc8, c == 0xc9:
			size, err = r.be(1 << (c - 0xc7))
			size++ // the ext type byte
		case c == 0xca:
			size = 4
		case c == 0xcb:
			size = 8
		case c >= 0xcc && c <= 0xcf:
			size = 1 << (c - 0xcc)
		case c >= 0xd0 && c <= 0xd3:
			size = 1 << (c - 0xd0)
		case c >= 0xd4 && c <= 0xd8:
			size = 1 + 1<<(c-0xd4)
		case c == 0xdc || c == 0xdd || c == 0xde || c == 0xdf:
			var k uint64
			k, err = r.be(2 << ((c - 0xdc) & 1)) // 16- or 32-bit count
			if c >= 0xde {
				k *= 2 // a map entry is two values
			}
			pending += k
		default:
			return fmt.Errorf("%w: code %#x", errType, c)
		}
		if err != nil {
			return err
		}
		if pending > uint64(len(r.b))+1 {
			return fmt.Errorf("%w: %d values in %d bytes", errShort, pending-1, len(r.b))
		}
		if _, err := r.take(size); err != nil {
			return err
		}
	}
	return nil
}

func (r *reader) uint64s() ([]uint64, error) {
	n, err := r.arrayLen()
	if err != nil {
		return nil, err
	}
	s := make([]uint64, n)
	for i := range s {
		if s[i], err = r.uint(math.MaxUint64); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (r *reader) error() (*Error, error) {
	if r.nil() {
		return nil, nil
	}
	n, err := r.arrayLen()
	if err != nil {
		return nil, err
	}
	if n < 2 {
		return nil, fmt.Errorf("%w: error of %d elements", errShort, n)
	}
	e := &Error{}
	code, err := r.uint(math.MaxUint8)
	if err != nil {
		return nil, err
	}
	e.Code = uint8(code)
	if e.Message, err = r.str(); err != nil {
		return nil, err
	}
	return e, r.skip(n - 2)
}

func (r *reader) tensors() ([]Tensor, error) {
	n, err := r.arrayLen()
	if err != nil {
		return nil, err
	}
	s := make([]Tensor, n)
	for i := range s {
		if err := r.tensor(&s[i]); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (r *reader) tensor(t *Tensor) error {
	n, err := r.arrayLen()
	if err != nil {
		return err
	}
	if n < 6 {
		return fmt.Errorf("%w: tensor of %d elements", errShort, n)
	}
	if t.Name, err = r.str(); err != nil {
		return err
	}
	dt, err := r.uint(math.MaxUint8)
	if err != nil {
		return err
	}
	t.DataType = uint8(dt)
	dims, err := r.arrayLen()
	if err != nil {
		return err
	}
	t.Shape = make([]int64, dims)
	for i := range t.Shape {
		if t.Shape[i], err = r.int(); err != nil {
			return err
		}
	}
	loc, err := r.uint(math.MaxUint8)
	if err != nil {
		return err
	}
	t.Loc = uint8(loc)
	if t.Offset, err = r.uint(math.MaxUint64); err != nil {
		return err
	}
	if t.Size, err = r.uint(math.MaxUint64); err != nil {
		return err
	}
	if t.Loc == LocInline {
		if n < 7 {
			return fmt.Errorf("%w: inline tensor without its bytes", errShort)
		}
		data, err := r.rawStr()
		if err != nil {
			return err
		}
		if uint64(len(data)) != t.Size {
			return fmt.Errorf("%w: inline tensor of %d bytes says size %d", errType, len(data), t.Size)
		}
		t.Data = append([]byte{}, data...) // the frame is reused once consumed
		return r.skip(n - 7)
	}
	if n >= 7 {
		if t.RegionID, err = r.uint(math.MaxUint64); err != nil {
			return err
		}
		return r.skip(n - 7)
	}
	return r.skip(n - 6)
}

func (r *reader) requests() ([]Request, error) {
	n, err := r.arrayLen()
	if err != nil {
		return nil, err
	}
	s := make([]Request, n)
	for i := range s {
		if err := r.request(&s[i]); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (r *reader) request(q *Request) error {
	n, err := r.arrayLen()
	if err != nil {
		return err
	}
	if n < 8 {
		return fmt.Errorf("%w: request of %d elements", errShort, n)
	}
	if q.Handle, err = r.uint(math.MaxUint64); err != nil {
		return err
	}
	if q.ID, err = r.str(); err != nil {
		return err
	}
	switch {
	case r.nil():
		q.CorrelationID = uint64(0)
	case len(r.b) > 0 && (r.b[0]&0xe0 == 0xa0 || (r.b[0] >= 0xd9 && r.b[0] <= 0xdb)):
		q.CorrelationID, err = r.str()
	default:
		q.CorrelationID, err = r.uint(math.MaxUint64)
	}
	if err != nil {
		return err
	}
	flags, err := r.uint(math.MaxUint32)
	if err != nil {
		return err
	}
	q.Flags = uint32(flags)
	if q.Inputs, err = r.tensors(); err != nil {
		return err
	}
	outs, err := r.arrayLen()
	if err != nil {
		return err
	}
	q.RequestedOutputs = make([]string, outs)
	for i := range q.RequestedOutputs {
		if q.RequestedOutputs[i], err = r.str(); err != nil {
			return err
		}
	}
	if q.ParametersJSON, err = r.str(); err != nil {
		return err
	}
	if q.TimeoutMicros, err = r.uint(math.MaxUint64); err != nil {
		return err
	}
	if n < 9 {
		return r.skip(n - 8)
	}
	if q.OutputTargets, err = r.outputTargets(); err != nil {
		return err
	}
	if n < 10 {
		return r.skip(n - 9)
	}
	if !r.nil() {
		if q.TraceContext, err = r.str(); err != nil {
			return err
		}
	}
	return r.skip(n - 10)
}

func (r *reader) outputTargets() ([]OutputTarget, error) {
	if r.nil() {
		return nil, nil
	}
	n, err := r.arrayLen()
	if err != nil || n == 0 {
		return nil, err
	}
	s := make([]OutputTarget, n)
	for i := range s {
		o := &s[i]
		k, err := r.arrayLen()
		if err != nil {
			return nil, err
		}
		if k < 4 {
			return nil, fmt.Errorf("%w: output target of %d elements", errShort, k)
		}
		if o.Name, err = r.str(); err != nil {
			return nil, err
		}
		if o.RegionID, err = r.uint(math.MaxUint64); err != nil {
			return nil, err
		}
		if o.Offset, err = r.uint(math.MaxUint64); err != nil {
			return nil, err
		}
		if o.Size, err = r.uint(math.MaxUint64); err != nil {
			return nil, err
		}
		if err = r.skip(k - 4); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (r *reader) responses() ([]Response, error) {
	n, err := r.arrayLen()
	if err != nil {
		return nil, err
	}
	s := make([]Response, n)
	for i := range s {
		if err := r.response(&s[i]); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (r *reader) response(p *Response) error {
	n, err := r.arrayLen()
	if err != nil {
		return err
	}
	if n < 5 {
		return fmt.Errorf("%w: response of %d elements", errShort, n)
	}
	if p.Handle, err = r.uint(math.MaxUint64); err != nil {
		return err
	}
	flags, err := r.uint(math.MaxUint32)
	if err != nil {
		return err
	}
	p.Flags = uint32(flags)
	if p.Error, err = r.error(); err != nil {
		return err
	}
	if p.Outputs, err = r.tensors(); err != nil {
		return err
	}
	if p.ParametersJSON, err = r.str(); err != nil {
		return err
	}
	return r.skip(n - 5)
}
