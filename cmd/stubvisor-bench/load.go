package main

import (
	"sync"
	"time"
)

// closedLoop runs conc callers, each calling call back to back, for warmup
// (unmeasured) and then for d, and returns the latency of every measured
// call. A call is measured when it starts inside the measured window, or,
// with byEnd, when it ends inside it: then calls longer than the warmup (a
// 4 MiB chain at c16 on a busy machine) still count once the window is
// longer than one of them. The first error stops its caller and is
// returned once every caller has stopped.
func closedLoop(conc int, warmup, d time.Duration, byEnd bool, call func() error) ([]time.Duration, error) {
	start := time.Now()
	measureFrom, end := start.Add(warmup), start.Add(warmup+d)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		samples  []time.Duration
		firstErr error
	)
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for {
				t0 := time.Now()
				if t0.After(end) {
					break
				}
				if err := call(); err != nil {
					mu.Lock()
					firstErr = cmpErr(firstErr, err)
					mu.Unlock()
					return
				}
				t1 := time.Now()
				if byEnd && t1.After(measureFrom) && !t1.After(end) || !byEnd && t0.After(measureFrom) {
					mine = append(mine, t1.Sub(t0))
				}
			}
			mu.Lock()
			samples = append(samples, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return samples, nil
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
