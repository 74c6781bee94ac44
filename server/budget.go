package server

import (
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"
)

// DefaultMaxInflightBytes is the default budget of request bytes the front
// ends hold at once (HTTP bodies and gRPC request messages together): one
// gRPC message of the largest size fits, a burst of large ones does not.
const DefaultMaxInflightBytes = 2 << 30

// freeAfterBytes is the size of request from which the end of a request
// hands memory back to the system at once (see byteBudget.release).
const freeAfterBytes = 32 << 20

// byteBudget bounds the request bytes held by requests in flight, so that a
// burst of large requests is refused (503, RESOURCE_EXHAUSTED) instead of
// growing the process without bound.
type byteBudget struct {
	limit   int64
	used    atomic.Int64
	freeing atomic.Bool
}

func newByteBudget(limit int64) *byteBudget {
	if limit <= 0 {
		limit = DefaultMaxInflightBytes
	}
	return &byteBudget{limit: limit}
}

// acquire reserves n bytes; it fails when they would take the budget over
// its limit.
func (b *byteBudget) acquire(n int64) error {
	if n <= 0 {
		return nil
	}
	for {
		used := b.used.Load()
		if used+n > b.limit {
			return &budgetError{size: n, used: used, limit: b.limit}
		}
		if b.used.CompareAndSwap(used, used+n) {
			return nil
		}
	}
}

// release gives n bytes back. After a large request, the memory it took
// is returned to the system within freeDelay: the Go heap holds little else (the
// binary collects garbage rarely, GOGC=400), so without this a burst of
// large requests would keep the process large for minutes.
func (b *byteBudget) release(n int64) {
	if n <= 0 {
		return
	}
	left := b.used.Add(-n)
	if n >= freeAfterBytes && left < freeAfterBytes && !b.freeing.Swap(true) {
		// A moment later, once the reply (sent after the handler
		// returns) is out and garbage too.
		time.AfterFunc(freeDelay, func() {
			defer b.freeing.Store(false)
			// Twice: buffers pooled (sync.Pool) survive one collection.
			debug.FreeOSMemory()
			debug.FreeOSMemory()
		})
	}
}

// freeDelay is how long after a large request ends its memory is handed
// back to the system.
const freeDelay = time.Second

// budgetError is the refusal of a request over the budget.
type budgetError struct{ size, used, limit int64 }

func (e *budgetError) Error() string {
	if e.size > e.limit {
		return fmt.Sprintf("request of %d bytes exceeds the server's budget of %d bytes for requests in flight (--max-inflight-request-bytes)", e.size, e.limit)
	}
	return fmt.Sprintf("request of %d bytes refused: requests in flight hold %d of the server's %d bytes (--max-inflight-request-bytes); retry later", e.size, e.used, e.limit)
}
