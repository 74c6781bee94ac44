package sched

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/supervisor/stubproc"
)

// These tests drive the dynamic batcher without stubs: the test itself
// plays the stub, taking batches from the model's queue. Every case uses a
// queue delay of an hour unless a batch is meant to go, so what is sent is
// decided by sizes and policies alone, never by timing.

// batcherModel is a model version with only what the batcher touches.
func batcherModel(t *testing.T, maxBatch int64, db *inferencepb.ModelDynamicBatching) (*testModel, *dynamicBatcher) {
	t.Helper()
	mv := &testModel{queue: make(chan *stubproc.Batch)}
	b := newDynamicBatcher(mv.schedModel(maxBatch), db, 1)
	t.Cleanup(b.Stop)
	return mv, b
}

// submitN queues a request of batch size n, as modelVersion.submit does.
func submitN(t *testing.T, mv *testModel, b *dynamicBatcher, n int64, req backendapi.InferRequest) (*stubproc.Request, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	req.ModelName = "m"
	pr := stubproc.NewRequest(ctx, &req, n, nil, false)
	mv.active.Add(1)
	if err := b.Enqueue(pr); err != nil {
		mv.active.Done()
		return nil, err
	}
	return pr, nil
}

// take receives the next batch the way a stub would, and answers its
// requests.
func take(t *testing.T, mv *testModel) []*stubproc.Request {
	t.Helper()
	select {
	case bt := <-mv.queue:
		for _, pr := range bt.Items {
			mv.Finish(pr, &backendapi.InferResponse{}, nil, true)
		}
		return bt.Items
	case <-time.After(10 * time.Second):
		t.Fatal("no batch within 10s")
		return nil
	}
}

func sizes(items []*stubproc.Request) []int64 {
	out := make([]int64, len(items))
	for i, pr := range items {
		out[i] = pr.Size()
	}
	return out
}

const hour = uint64(time.Hour / time.Microsecond)

func TestDynamicBatcherForming(t *testing.T) {
	tests := []struct {
		name      string
		maxBatch  int64
		preferred []int32
		delayUS   uint64
		submit    []int64   // batch sizes, in arrival order
		want      [][]int64 // the batches, in order, that must go
	}{
		{"waits for the preferred size", 8, []int32{4}, hour, []int64{1, 1, 1, 1}, [][]int64{{1, 1, 1, 1}}},
		{"never exceeds max_batch_size", 8, []int32{8}, hour, []int64{3, 3, 3}, [][]int64{{3, 3}}},
		{"a preferred size goes at once", 8, []int32{2, 6}, hour, []int64{2}, [][]int64{{2}}},
		{"no batching: one request per execute", 0, nil, 0, []int64{1, 1}, [][]int64{{1}, {1}}},
		{"zero delay sends what is there", 8, []int32{8}, 0, []int64{5}, [][]int64{{5}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mv, b := batcherModel(t, tc.maxBatch, &inferencepb.ModelDynamicBatching{PreferredBatchSize: tc.preferred, MaxQueueDelayMicroseconds: tc.delayUS})
			for _, n := range tc.submit {
				if _, err := submitN(t, mv, b, n, backendapi.InferRequest{}); err != nil {
					t.Fatal(err)
				}
			}
			for i, want := range tc.want {
				if got := sizes(take(t, mv)); !slices.Equal(got, want) {
					t.Errorf("batch %d = %v, want %v", i, got, want)
				}
			}
		})
	}
}

func TestDynamicBatcherPriority(t *testing.T) {
	mv, b := batcherModel(t, 2, &inferencepb.ModelDynamicBatching{
		PreferredBatchSize: []int32{2}, MaxQueueDelayMicroseconds: hour,
		PriorityLevels: 2, DefaultPriorityLevel: 2,
	})
	low, err := submitN(t, mv, b, 1, backendapi.InferRequest{ID: "low"})
	if err != nil {
		t.Fatal(err)
	}
	high, err := submitN(t, mv, b, 1, backendapi.InferRequest{ID: "high", Priority: 1})
	if err != nil {
		t.Fatal(err)
	}
	got := take(t, mv)
	if len(got) != 2 || got[0] != high || got[1] != low {
		t.Errorf("batch order %v, want the priority 1 request first", got)
	}
}

func TestDynamicBatcherQueuePolicy(t *testing.T) {
	policy := func(p *inferencepb.ModelQueuePolicy) *inferencepb.ModelDynamicBatching {
		return &inferencepb.ModelDynamicBatching{PreferredBatchSize: []int32{8}, MaxQueueDelayMicroseconds: hour, DefaultQueuePolicy: p}
	}
	timeoutErr := backendapi.Errorf(backendapi.Unavailable, "Request timeout expired")

	t.Run("default timeout rejects", func(t *testing.T) {
		mv, b := batcherModel(t, 8, policy(&inferencepb.ModelQueuePolicy{DefaultTimeoutMicroseconds: 1000}))
		pr, err := submitN(t, mv, b, 1, backendapi.InferRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pr.Wait(); !sameError(err, timeoutErr) || !errors.Is(err, ErrTimeoutExpired) {
			t.Errorf("got %v, want %v", err, timeoutErr)
		}
	})
	t.Run("request timeout overrides when allowed", func(t *testing.T) {
		mv, b := batcherModel(t, 8, policy(&inferencepb.ModelQueuePolicy{AllowTimeoutOverride: true}))
		pr, err := submitN(t, mv, b, 1, backendapi.InferRequest{Timeout: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pr.Wait(); !sameError(err, timeoutErr) || !errors.Is(err, ErrTimeoutExpired) {
			t.Errorf("got %v, want %v", err, timeoutErr)
		}
	})
	t.Run("DELAY keeps the request", func(t *testing.T) {
		mv, b := batcherModel(t, 8, &inferencepb.ModelDynamicBatching{PreferredBatchSize: []int32{2}, MaxQueueDelayMicroseconds: hour,
			DefaultQueuePolicy: &inferencepb.ModelQueuePolicy{TimeoutAction: inferencepb.ModelQueuePolicy_DELAY, DefaultTimeoutMicroseconds: 1000}})
		first, err := submitN(t, mv, b, 1, backendapi.InferRequest{})
		if err != nil {
			t.Fatal(err)
		}
		second, err := submitN(t, mv, b, 1, backendapi.InferRequest{})
		if err != nil {
			t.Fatal(err)
		}
		got := take(t, mv)
		if len(got) != 2 {
			t.Fatalf("batch of %d, want both requests", len(got))
		}
		for _, pr := range []*stubproc.Request{first, second} {
			if _, err := pr.Wait(); err != nil {
				t.Errorf("delayed request failed: %v", err)
			}
		}
	})
	t.Run("queue full", func(t *testing.T) {
		mv, b := batcherModel(t, 8, policy(&inferencepb.ModelQueuePolicy{MaxQueueSize: 1}))
		if _, err := submitN(t, mv, b, 1, backendapi.InferRequest{}); err != nil {
			t.Fatal(err)
		}
		_, err := submitN(t, mv, b, 1, backendapi.InferRequest{})
		if want := backendapi.Errorf(backendapi.Unavailable, "Exceeds maximum queue size"); !sameError(err, want) || !errors.Is(err, ErrQueueFull) {
			t.Errorf("got %v, want %v", err, want)
		}
	})
	t.Run("stop fails what waits", func(t *testing.T) {
		mv, b := batcherModel(t, 8, policy(nil))
		pr, err := submitN(t, mv, b, 1, backendapi.InferRequest{})
		if err != nil {
			t.Fatal(err)
		}
		b.Stop()
		if _, err := pr.Wait(); err == nil {
			t.Error("request queued at stop succeeded")
		}
		if _, err := submitN(t, mv, b, 1, backendapi.InferRequest{}); err == nil {
			t.Error("enqueue after stop succeeded")
		}
	})
}

// sameError compares two backendapi errors by code and text.
func sameError(got, want error) bool {
	var g, w *backendapi.Error
	return errors.As(got, &g) && errors.As(want, &w) && g.Code == w.Code && g.Msg == w.Msg
}
