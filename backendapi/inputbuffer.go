package backendapi

import (
	"context"
	"sync/atomic"
	"unsafe"
)

// InputBuffers is a capability a Backend may have besides Backend: memory
// for a request's binary inputs in the place the model reads them from, so
// that a front end reads tensor bytes from the socket straight there and
// the backend need not copy them before the model runs.
type InputBuffers interface {
	// InputBuffer returns a buffer of n bytes for the inputs of one
	// request to the model version, or nil when the backend has none to
	// offer (the front end then reads into its own memory). The front end
	// sets InferRequest.InputBuffer when inputs' Data lie in it, and calls
	// Release once it is done with the request: after Infer returned and
	// its response was released, or when it does not run the request.
	InputBuffer(ctx context.Context, model string, version int64, n int) *InputBuffer
}

// InputBuffer is memory a backend lent a front end for a request's inputs
// (InputBuffers). The front end holds it from InputBuffer to Release; the
// backend holds it again (Hold) while a model may read it, so that a
// caller who leaves early does not free bytes still in use. The memory is
// freed when the last holder lets go.
type InputBuffer struct {
	// Data is the buffer's memory.
	Data []byte
	// Owner is the backend's own identification of where Data lies.
	Owner any

	holds    atomic.Int32
	released atomic.Bool
	free     func()
}

// NewInputBuffer makes a buffer over data, held once by the front end it is
// handed to; free runs once when the last holder lets go.
func NewInputBuffer(data []byte, owner any, free func()) *InputBuffer {
	b := &InputBuffer{Data: data, Owner: owner, free: free}
	b.holds.Store(1)
	return b
}

// Offset returns where data starts in the buffer, or -1 when data is empty
// or does not lie wholly in it.
func (b *InputBuffer) Offset(data []byte) int {
	if b == nil || len(data) == 0 || len(b.Data) == 0 {
		return -1
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b.Data)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	if p < start || p-start > uintptr(len(b.Data)) || uintptr(len(data)) > uintptr(len(b.Data))-(p-start) {
		return -1
	}
	return int(p - start)
}

// Hold takes one more hold on the buffer for a backend that reads it. It
// fails once every holder has let go (the memory may be gone).
func (b *InputBuffer) Hold() bool {
	for {
		n := b.holds.Load()
		if n <= 0 {
			return false
		}
		if b.holds.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Unhold ends one hold taken with Hold.
func (b *InputBuffer) Unhold() {
	if b.holds.Add(-1) == 0 {
		b.free()
	}
}

// Release ends the front end's hold. It is idempotent.
func (b *InputBuffer) Release() {
	if b == nil || !b.released.CompareAndSwap(false, true) {
		return
	}
	b.Unhold()
}
