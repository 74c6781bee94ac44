package ipc

// The shapes inside messages (Request, Tensor, OutputTarget, Response,
// Error, offset lists): each one's writer and reader. msgcodec.go puts
// them together into messages; msgpack_write.go and msgpack_read.go hold
// the msgpack primitives.

import (
	"fmt"
	"math"
)

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

func appendUint64s(b []byte, vs []uint64) []byte {
	b = appendArrayLen(b, len(vs))
	for _, v := range vs {
		b = appendUint(b, v)
	}
	return b
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
