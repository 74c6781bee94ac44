package server

import (
	"math/bits"
	"runtime"
	"sync"
	"unsafe"

	"google.golang.org/grpc/mem"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

// reusePool is the gRPC server's buffer pool (the transport's frames, the
// codec's temporary buffers, the copies of large outputs): buffers grouped
// by powers of two up to 16 MiB. Unlike grpc-go's default pool it hands a
// buffer back as it was, without clearing it: every user writes the
// length it asked for before reading it, and clearing a 4 MiB message's
// frames cost 6.7% of the server's CPU on it.
type reusePool struct {
	classes [reuseClasses]sync.Pool
}

// reuseClasses are the sizes 2^8 .. 2^24; other sizes are allocated.
const (
	reuseMinShift = 8
	reuseClasses  = 17
)

var grpcPool = new(reusePool)

var _ mem.BufferPool = (*reusePool)(nil)

// class returns the class of a buffer of capacity n, or -1.
func reuseClass(n int) int {
	if n <= 1<<reuseMinShift {
		return 0
	}
	c := bits.Len(uint(n-1)) - reuseMinShift
	if c >= reuseClasses {
		return -1
	}
	return c
}

func (p *reusePool) Get(length int) *[]byte {
	c := reuseClass(length)
	if c < 0 {
		b := make([]byte, length)
		return &b
	}
	if v, ok := p.classes[c].Get().(*[]byte); ok {
		*v = (*v)[:length]
		return v
	}
	b := make([]byte, length, 1<<(c+reuseMinShift))
	return &b
}

func (p *reusePool) Put(b *[]byte) {
	n := cap(*b)
	c := reuseClass(n)
	if c < 0 || n != 1<<(c+reuseMinShift) {
		return // not one of ours
	}
	p.classes[c].Put(b)
}

// pooledOutputs maps the first byte of a large output copied into a
// buffer of grpcPool (buildGRPCResponse) to that buffer, until Marshal
// hands it to the transport, which puts it back once it is written. A
// response never marshalled lets its entries go when it is collected, and
// its buffers are then left to the collector.
var pooledOutputs sync.Map // uintptr -> *[]byte

// pooledCopy returns a copy of data in a grpcPool buffer that Marshal will
// give the transport to put back (when it is large enough to matter).
func pooledCopy(out *pb.ModelInferResponse, data []byte) []byte {
	if len(data) < tensorCodecMin {
		return append([]byte(nil), data...)
	}
	b := grpcPool.Get(len(data))
	copy(*b, data)
	key := uintptr(unsafe.Pointer(unsafe.SliceData(*b)))
	pooledOutputs.Store(key, b)
	runtime.AddCleanup(out, func(b *[]byte) { pooledOutputs.CompareAndDelete(key, b) }, b)
	return *b
}

// outputBuffer is the transport buffer of one raw output: its grpcPool
// buffer when pooledCopy made it, the bytes as they are otherwise.
func outputBuffer(r []byte) mem.Buffer {
	if len(r) > 0 {
		if v, ok := pooledOutputs.LoadAndDelete(uintptr(unsafe.Pointer(unsafe.SliceData(r)))); ok {
			b := v.(*[]byte)
			*b = (*b)[:len(r)]
			return mem.NewBuffer(b, grpcPool)
		}
	}
	return mem.SliceBuffer(r)
}
