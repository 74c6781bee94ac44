package stubproc

import (
	"sync"
	"testing"
	"time"
)

// parkedWithin waits up to a second for w to have n parked workers.
func parkedWithin(t *testing.T, w *workers, n int32) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for w.parked.Load() != n {
		if time.Now().After(deadline) {
			t.Fatalf("parked workers: %d, want %d", w.parked.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWorkersRunEveryFunctionOnce(t *testing.T) {
	for _, n := range []int{1, 10, 3 * maxParkedWorkers} {
		w := newWorkers()
		t.Cleanup(w.stop)
		var mu sync.Mutex
		ran := make(map[int]int)
		var wg sync.WaitGroup
		wg.Add(n)
		for i := range n {
			w.run(func() {
				defer wg.Done()
				mu.Lock()
				ran[i]++
				mu.Unlock()
			})
		}
		wg.Wait()
		for i := range n {
			if ran[i] != 1 {
				t.Fatalf("n=%d: function %d ran %d times", n, i, ran[i])
			}
		}
		if p := w.parked.Load(); p > maxParkedWorkers {
			t.Fatalf("n=%d: %d workers parked, at most %d may be", n, p, maxParkedWorkers)
		}
	}
}

// A busy worker does not hold up the next function: run starts another.
func TestWorkersRunBesideABusyOne(t *testing.T) {
	w := newWorkers()
	t.Cleanup(w.stop)
	second := make(chan struct{})
	firstDone := make(chan struct{})
	w.run(func() {
		defer close(firstDone)
		select {
		case <-second:
		case <-time.After(10 * time.Second):
			t.Error("the second function did not run while the first waited for it")
		}
	})
	w.run(func() { close(second) })
	<-firstDone
}

// A worker that finished parks and takes the next function.
func TestWorkersReuseAParkedWorker(t *testing.T) {
	w := newWorkers()
	t.Cleanup(w.stop)
	w.run(func() {})
	parkedWithin(t, w, 1)
	release := make(chan struct{})
	done := make(chan struct{})
	w.run(func() {
		<-release
		close(done)
	})
	// The parked worker runs it: none is left parked meanwhile.
	parkedWithin(t, w, 0)
	close(release)
	<-done
	parkedWithin(t, w, 1)
}

// stop ends the parked workers, and a second stop does nothing.
func TestWorkersStopEndsParkedOnes(t *testing.T) {
	w := newWorkers()
	t.Cleanup(w.stop) // should the test end before its own stop
	gate := make(chan struct{})
	for range 3 { // all busy at once: three workers
		w.run(func() { <-gate })
	}
	close(gate)
	parkedWithin(t, w, 3)
	w.stop()
	parkedWithin(t, w, 0)
	w.stop()
}
