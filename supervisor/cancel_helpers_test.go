package supervisor

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stubvisor/stubvisor/backendapi"
)

// cancelStaggered runs call 320 times from 8 goroutines, cancelling each
// call's context after a busy wait of 0 to ~2 ms, so cancels land in every
// phase of a request (queued, being prepared, executing, answered). Every
// call must succeed or fail with Cancelled, and some must be cancelled, or
// the run tested nothing.
func cancelStaggered(t *testing.T, call func(ctx context.Context) error) {
	t.Helper()
	var wg sync.WaitGroup
	var cancelled atomic.Int64
	errs := make(chan error, 8*40)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				ctx, cancel := context.WithCancel(context.Background())
				go func() {
					for range (g*40 + i) % 64 * 1000 {
						if ctx.Err() != nil {
							return
						}
					}
					cancel()
				}()
				err := call(ctx)
				cancel()
				switch {
				case err == nil:
				case backendapi.CodeOf(err) == backendapi.Cancelled:
					cancelled.Add(1)
				default:
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if cancelled.Load() == 0 {
		t.Fatal("no call was cancelled: the staggered cancels all came too late")
	}
}
