package httpserve

import (
	"io"
	"net/http"
	"sync"
)

// KeepWriter returns the writer a handler writes the rest of w's reply body
// to when the bytes it writes stay unchanged until release runs, and
// whether it took release.
//
// The fasthttp engine buffers a reply until its handler returns, so a body
// written from memory the handler frees on return (a tensor in a stub's
// arena) would be copied once more than under net/http, which writes it
// through to the connection. Through this writer the engine keeps those
// bytes where they are and writes them to the connection from there after
// the handler returns; release runs once they are written, or the reply is
// dropped (a client that hung up, a handler that panicked), on the
// connection's goroutine. The handler must then neither change those bytes
// nor call release itself.
//
// Where the writer is not the fasthttp engine's own (net/http, a streamed
// route), KeepWriter returns w and false: writes go through as usual and
// the caller releases its memory when it is done, as before.
func KeepWriter(w http.ResponseWriter, release func()) (io.Writer, bool) {
	bw, ok := w.(*bridgeWriter)
	if !ok || release == nil {
		return w, false
	}
	if bw.kept == nil {
		k := keptPool.Get().(*keptBody)
		// What the handler wrote so far sits in fasthttp's buffer, which
		// SetBodyStream resets: it moves to the front of the kept body.
		k.copyIn(bw.ctx.Response.Body())
		bw.ctx.Response.ResetBody()
		bw.kept = k
	}
	bw.kept.releases = append(bw.kept.releases, release)
	return keptWriter{bw}, true
}

// keptWriter is KeepWriter's writer: its writes are kept, not copied.
type keptWriter struct{ w *bridgeWriter }

func (k keptWriter) Write(p []byte) (int, error) {
	k.w.start(p)
	k.w.kept.keep(p)
	return len(p), nil
}

// keptBody is a reply body made of spans, each either bytes the handler
// wrote through a KeepWriter (kept where they are) or bytes it wrote
// otherwise (copied into own). It is the fasthttp response's body stream:
// fasthttp writes it with WriteTo (a large span goes from where it is to
// the connection, as net/http's bufio.Writer does with a large write) and
// closes it once written or dropped, which runs the releases.
type keptBody struct {
	own      []byte
	spans    []span
	size     int
	releases []func()
	next     int // the first span Read has not finished
	off      int // how much of spans[next] Read returned
}

// span is kept (non-nil) or own[start:end].
type span struct {
	kept       []byte
	start, end int
}

var keptPool = sync.Pool{New: func() any { return new(keptBody) }}

func (k *keptBody) bytes(s span) []byte {
	if s.kept != nil {
		return s.kept
	}
	return k.own[s.start:s.end]
}

// copyIn appends a copy of p.
func (k *keptBody) copyIn(p []byte) {
	if len(p) == 0 {
		return
	}
	start := len(k.own)
	k.own = append(k.own, p...)
	if n := len(k.spans); n > 0 && k.spans[n-1].kept == nil && k.spans[n-1].end == start {
		k.spans[n-1].end = len(k.own)
	} else {
		k.spans = append(k.spans, span{start: start, end: len(k.own)})
	}
	k.size += len(p)
}

// keep appends p itself.
func (k *keptBody) keep(p []byte) {
	if len(p) == 0 {
		return
	}
	k.spans = append(k.spans, span{kept: p})
	k.size += len(p)
}

// WriteTo writes what Read has not returned to w: fasthttp copies a body
// stream that has it with it, into its bufio.Writer, which passes a span
// larger than its buffer straight to the connection.
func (k *keptBody) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for ; k.next < len(k.spans); k.next, k.off = k.next+1, 0 {
		m, err := w.Write(k.bytes(k.spans[k.next])[k.off:])
		n += int64(m)
		if err != nil {
			k.off += m
			return n, err
		}
	}
	return n, nil
}

func (k *keptBody) Read(p []byte) (int, error) {
	if k.next == len(k.spans) {
		return 0, io.EOF
	}
	n := copy(p, k.bytes(k.spans[k.next])[k.off:])
	if k.off += n; k.off == len(k.bytes(k.spans[k.next])) {
		k.next, k.off = k.next+1, 0
	}
	return n, nil
}

// Close runs the releases and returns k to its pool. fasthttp calls it once
// the body is written or the response is reset; the bridge calls it for a
// reply that is never written.
func (k *keptBody) Close() error {
	for i, f := range k.releases {
		k.releases[i] = nil
		f()
	}
	for i := range k.spans {
		k.spans[i] = span{}
	}
	k.own, k.spans, k.releases = k.own[:0], k.spans[:0], k.releases[:0]
	k.size, k.next, k.off = 0, 0, 0
	if cap(k.own) <= keptOwnMax {
		keptPool.Put(k)
	}
	return nil
}

// keptOwnMax bounds the copied bytes a pooled keptBody keeps room for.
const keptOwnMax = 64 << 10
