package stubproc

import (
	"sync"
	"sync/atomic"
)

// workers runs functions on goroutines that live on between them. A BLS
// call's goroutine runs deep (the call, the callee's scheduler, the read
// of the callee's ring that serves it): one started afresh for each call
// began with a small stack and grew it, copying it, several times per
// call, about 8% of the server's CPU in a chain of decoupled BLS calls. A
// worker keeps the stack it grew for the next call.
type workers struct {
	idle    chan func()
	parked  atomic.Int32
	stopped sync.Once
}

// maxParkedWorkers bounds the goroutines kept waiting for work.
const maxParkedWorkers = 64

func newWorkers() *workers { return &workers{idle: make(chan func())} }

// run hands f to a parked worker, or to a new one if none waits.
func (w *workers) run(f func()) {
	select {
	case w.idle <- f:
	default:
		go w.work(f)
	}
}

func (w *workers) work(f func()) {
	for {
		f()
		if w.parked.Add(1) > maxParkedWorkers {
			w.parked.Add(-1)
			return
		}
		next, ok := <-w.idle
		w.parked.Add(-1)
		if !ok {
			return
		}
		f = next
	}
}

// stop ends the parked workers, and those still busy once they finish;
// a second stop does nothing, and run must not be called after the
// first. The process's own pool lives as long as the process: only tests
// stop theirs.
func (w *workers) stop() { w.stopped.Do(func() { close(w.idle) }) }

// blsWorkers serve the InferExec messages of every stub.
var blsWorkers = newWorkers()
