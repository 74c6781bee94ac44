package ipc

import (
	"bytes"
	"errors"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"
)

// The codec is written by hand over byte slices for the fixed shapes of
// messages.go: no reflection, no interface calls per element, and every
// length checked against the bytes that are left before anything is
// allocated, so a hostile frame costs at most its own size. Free-form
// values (Initialize options, a Result's value) are encoded with the
// msgpack library and decoded by anyValue, with a depth cap.
//
// Files: this one holds the Encoder and Decoder and the envelope every
// message shares; msgcodec.go, one table entry per message kind with its
// encoder and decoder side by side; shapes.go, the shapes inside messages;
// msgpack_write.go and msgpack_read.go, the msgpack primitives.

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
	if m == nil {
		return nil, errors.New("nil message")
	}
	c := &codecs[m.Kind()]
	if c.enc == nil {
		return nil, fmt.Errorf("unknown message type %T", m)
	}
	return c.enc(e, b, m)
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

// decoder holds nothing between frames today; it is a type so the hot
// path can grow caches without changing callers.
// decoder holds its reader, so that handing it to a kind's codec does
// not move it to the heap on every frame.
type decoder struct{ r reader }

// errShort and friends are the decoding failures; they are wrapped with
// ErrProtocol and the message kind by decode.
var (
	errShort = errors.New("truncated")
	errType  = errors.New("unexpected type")
	errRange = errors.New("value out of range")
)

func (d *decoder) decode(b []byte) (m Message, err error) {
	d.r = reader{b: b}
	r := &d.r
	defer func() { d.r = reader{} }() // keep no reference to the frame
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
	c := &codecs[kind]
	if c.dec == nil {
		return nil, fmt.Errorf("ipc: decode: unknown message kind %d: %w", kind, ErrProtocol)
	}
	if n < c.min {
		return nil, fmt.Errorf("ipc: decode kind %d: %d elements, want %d: %w", kind, n, c.min, ErrProtocol)
	}
	m, want, err := c.dec(r, id, n)
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
