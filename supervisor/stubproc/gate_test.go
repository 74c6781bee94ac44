package stubproc

import (
	"context"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
)

// TestBatchContext: the wait for a grant ends once every request with a
// caller has ended its context, or the stub takes no more work; fillers
// have no caller and never end it.
func TestBatchContext(t *testing.T) {
	for _, tc := range []struct {
		name     string
		callers  int  // requests with a cancellable context
		fillers  int  // filler requests
		cancel   int  // callers whose context ends
		stopStub bool // the stub stops serving
		done     bool // whether the wait's context is done
	}{
		{name: "one caller waits", callers: 1, done: false},
		{name: "one caller gives up", callers: 1, cancel: 1, done: true},
		{name: "one of two callers gives up", callers: 2, cancel: 1, done: false},
		{name: "both callers give up", callers: 2, cancel: 2, done: true},
		{name: "a filler does not keep a given-up batch waiting", callers: 1, fillers: 1, cancel: 1, done: true},
		{name: "fillers alone wait for the stub", fillers: 2, done: false},
		{name: "fillers alone end with the stub", fillers: 2, stopStub: true, done: true},
		{name: "callers end with the stub", callers: 2, stopStub: true, done: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Proc{}
			p.serving, p.endServing = context.WithCancel(context.Background())
			defer p.endServing()
			b := &Batch{}
			var cancels []context.CancelFunc
			for range tc.callers {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				cancels = append(cancels, cancel)
				b.Items = append(b.Items, NewRequest(ctx, &backendapi.InferRequest{}, 1, nil, false))
			}
			for range tc.fillers {
				b.Items = append(b.Items, NewFiller(&backendapi.InferRequest{}))
			}
			ctx, stop := p.batchContext(b)
			defer stop()
			for _, c := range cancels[:tc.cancel] {
				c()
			}
			if tc.stopStub {
				p.endServing()
			}
			if tc.done {
				select {
				case <-ctx.Done(): // the AfterFuncs run on goroutines of their own
				case <-time.After(5 * time.Second):
					t.Fatal("the wait did not end")
				}
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("the wait ended: %v", ctx.Err())
			}
			stop()
			if ctx.Err() == nil {
				t.Fatal("stop did not end the wait's context")
			}
		})
	}
}
