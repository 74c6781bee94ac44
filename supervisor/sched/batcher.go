package sched

import (
	"slices"
	"sync"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/supervisor/stubproc"
)

// dynamicBatcher is Triton's dynamic batcher. Requests wait in per-priority
// queues; one goroutine forms batches from their heads and offers each on
// the model's unbuffered queue, so a batch is handed over only at the
// moment a stub has a free pipeline slot. Until then it keeps growing with
// the requests that arrive, which is what merges requests under load.
//
// A batch is the longest prefix of the queue (highest priority first,
// each level's delayed requests after its others) whose summed batch size
// fits max_batch_size. It is sent at once when it reaches the largest
// preferred size, or when it is a preferred size and the oldest request
// has not waited max_queue_delay_microseconds yet; otherwise it waits for
// more requests until that delay has passed.
type dynamicBatcher struct {
	mv *model
	// capacity is max_batch_size; 0 means the model does not batch and
	// every execute gets one request.
	capacity int64
	rule     batchRule
	levels   []*policyQueue // index 0 is priority level 1, the highest
	defLevel int            // index of the default priority level

	mu      sync.Mutex
	stopped bool

	wake  chan struct{} // a request arrived (capacity 1: signals coalesce)
	stopc chan struct{}
	done  chan struct{}
}

// policyQueue is one priority level with its queue policy.
type policyQueue struct {
	reject   bool // timeout_action REJECT (else DELAY)
	timeout  time.Duration
	override bool
	maxSize  int
	queue    []*queued
	delayed  []*queued // timed out under the DELAY action
}

// queued is a request waiting in the batcher.
type queued struct {
	pr       *stubproc.Request
	deadline time.Time // zero: no timeout
}

// The queue policy's two rejections, with Triton's exact texts; the
// statistics count them as REJECTED (match them with errors.Is). A full
// queue is backendapi's sentinel, so that front ends can tell it too (the
// OpenAI API answers it with 429).
var (
	ErrTimeoutExpired error = &backendapi.Error{Code: backendapi.Unavailable, Msg: "Request timeout expired"}
	ErrQueueFull            = backendapi.ErrQueueFull
)

// newDynamicBatcher batches by the requests' batch dimension up to
// max_batch_size, or, for a model without one (max_batch_size 0), counts
// each request as one up to perExecute (db may be nil: no queue delay).
func newDynamicBatcher(mv *model, db *inferencepb.ModelDynamicBatching, perExecute int) *dynamicBatcher {
	limit := mv.maxBatch
	if limit == 0 {
		limit = int64(perExecute)
	}
	b := &dynamicBatcher{
		mv:       mv,
		capacity: mv.maxBatch,
		rule:     newBatchRule(limit, db.GetPreferredBatchSize(), db.GetMaxQueueDelayMicroseconds()),
		wake:     make(chan struct{}, 1),
		stopc:    make(chan struct{}),
		done:     make(chan struct{}),
	}
	levels := int(db.GetPriorityLevels())
	if levels == 0 {
		levels = 1
	} else {
		b.defLevel = int(db.GetDefaultPriorityLevel()) - 1
	}
	for l := range levels {
		pol := db.GetDefaultQueuePolicy()
		if p, ok := db.GetPriorityQueuePolicy()[uint64(l+1)]; ok {
			pol = p
		}
		b.levels = append(b.levels, &policyQueue{
			reject:   pol.GetTimeoutAction() == inferencepb.ModelQueuePolicy_REJECT,
			timeout:  time.Duration(pol.GetDefaultTimeoutMicroseconds()) * time.Microsecond,
			override: pol.GetAllowTimeoutOverride(),
			maxSize:  int(pol.GetMaxQueueSize()),
		})
	}
	go b.run()
	return b
}

// enqueue places the request in its priority level, or refuses it when
// that level's queue is full.
func (b *dynamicBatcher) Enqueue(pr *stubproc.Request) error {
	level := b.defLevel
	if p := pr.Req().Priority; p != 0 && p <= uint64(len(b.levels)) {
		level = int(p - 1)
	}
	q := b.levels[level]
	timeout := q.timeout
	if t := pr.Req().Timeout; q.override && t > 0 && (timeout == 0 || t < timeout) {
		timeout = t
	}
	e := &queued{pr: pr}
	if timeout > 0 {
		e.deadline = pr.Queued().Add(timeout)
	}
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		return backendapi.Errorf(backendapi.Unavailable, "model '%s' version %d is being unloaded", b.mv.name, b.mv.version)
	}
	if q.maxSize > 0 && len(q.queue)+len(q.delayed) >= q.maxSize {
		b.mu.Unlock()
		return ErrQueueFull
	}
	q.queue = append(q.queue, e)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	return nil
}

// run is the batcher's only consumer: it expires timed-out requests,
// drops cancelled ones, forms the next batch and offers it to the stubs.
func (b *dynamicBatcher) run() {
	defer close(b.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		items, next, ready := b.form(now)
		var offer chan<- *stubproc.Batch
		var bt *stubproc.Batch
		if ready {
			if r := b.mv.d.Take(); r != nil {
				// A stub has room now: send from here rather than wake
				// its dispatcher.
				b.taken(items)
				r.Execute(&stubproc.Batch{Items: items})
				continue
			}
			offer = b.mv.queue
			bt = &stubproc.Batch{Items: items}
		}
		var tc <-chan time.Time
		if !next.IsZero() {
			timer.Reset(max(time.Until(next), 0))
			tc = timer.C
		}
		select {
		case offer <- bt:
			b.taken(items)
		case <-b.wake:
		case <-tc:
		case <-b.stopc:
			return
		}
		if tc != nil && !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// form expires and drops what must leave the queue, then gathers the next
// batch. It returns the batch, the next time something changes
// on its own (a timeout or the end of the queue delay) and whether the
// batch should be sent now.
func (b *dynamicBatcher) form(now time.Time) (items []*stubproc.Request, next time.Time, ready bool) {
	var size int64
	var expired, cancelled []*stubproc.Request
	b.mu.Lock()
	for _, q := range b.levels {
		q.queue = slices.DeleteFunc(q.queue, func(e *queued) bool {
			switch {
			case e.pr.Gone():
				cancelled = append(cancelled, e.pr)
				return true
			case e.deadline.IsZero():
				return false
			case !now.Before(e.deadline):
				if q.reject {
					expired = append(expired, e.pr)
				} else {
					e.deadline = time.Time{}
					q.delayed = append(q.delayed, e)
				}
				return true
			}
			if next.IsZero() || e.deadline.Before(next) {
				next = e.deadline
			}
			return false
		})
		q.delayed = slices.DeleteFunc(q.delayed, func(e *queued) bool {
			if e.pr.Gone() {
				cancelled = append(cancelled, e.pr)
				return true
			}
			return false
		})
	}
	var sizes []int64
	full := false // the next request does not fit
gather:
	for _, q := range b.levels {
		for _, list := range [][]*queued{q.queue, q.delayed} {
			for _, e := range list {
				n := e.pr.Size()
				if b.capacity == 0 {
					n = 1
				}
				if len(items) > 0 && size+n > b.rule.limit {
					full = true
					break gather
				}
				items, sizes = append(items, e.pr), append(sizes, n)
				size += n
			}
		}
	}
	b.mu.Unlock()

	for _, pr := range expired {
		b.mv.finish(pr, nil, ErrTimeoutExpired, true)
	}
	for _, pr := range cancelled {
		b.mv.finish(pr, nil, backendapi.Errorf(backendapi.Cancelled, "request for model '%s' was cancelled while queued", b.mv.name), true)
	}
	if len(items) == 0 {
		return nil, next, false
	}
	n, delayEnd := b.rule.cut(items, sizes, full, now)
	if n > 0 {
		return items[:n], next, true
	}
	if next.IsZero() || delayEnd.Before(next) {
		next = delayEnd
	}
	return items, next, false
}

// batchRule decides when a forming batch goes to a stub: at once when it
// is full or reaches the largest preferred size, else at once as its
// longest preferred prefix, else when its oldest request has waited the
// queue delay. The dynamic batcher and the sequence batcher's oldest
// strategy share it.
type batchRule struct {
	limit        int64   // max_batch_size, at least 1
	preferred    []int64 // ascending, none above limit
	maxPreferred int64   // the largest preferred size, or limit
	delay        time.Duration
}

func newBatchRule(maxBatch int64, preferred []int32, delayMicros uint64) batchRule {
	r := batchRule{limit: max(maxBatch, 1), delay: time.Duration(delayMicros) * time.Microsecond}
	for _, p := range preferred {
		if int64(p) <= r.limit {
			r.preferred = append(r.preferred, int64(p))
		}
	}
	slices.Sort(r.preferred)
	r.maxPreferred = r.limit
	if n := len(r.preferred); n > 0 {
		r.maxPreferred = r.preferred[n-1]
	}
	return r
}

// cut looks at a candidate batch (items in order, with their batch sizes;
// together they fit limit, and full says the next waiting one would not)
// and returns how many of them to send now, or 0 and the time the queue
// delay runs out.
func (r batchRule) cut(items []*stubproc.Request, sizes []int64, full bool, now time.Time) (int, time.Time) {
	var size int64
	var oldest time.Time
	best := 0 // request count of the longest prefix whose size is preferred
	for i, n := range sizes {
		size += n
		if slices.Contains(r.preferred, size) {
			best = i + 1
		}
		if oldest.IsZero() || items[i].Queued().Before(oldest) {
			oldest = items[i].Queued()
		}
	}
	delayEnd := oldest.Add(r.delay)
	switch {
	case full || size >= r.maxPreferred || r.delay == 0 || !now.Before(delayEnd):
		return len(items), time.Time{}
	case best > 0:
		return best, time.Time{}
	}
	return 0, delayEnd
}

// taken removes the requests a stub just took. They are found by
// identity: a request of higher priority may have arrived since the batch
// was formed.
func (b *dynamicBatcher) taken(items []*stubproc.Request) {
	set := make(map[*stubproc.Request]bool, len(items))
	for _, pr := range items {
		set[pr] = true
	}
	in := func(e *queued) bool { return set[e.pr] }
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, q := range b.levels {
		q.queue = slices.DeleteFunc(q.queue, in)
		q.delayed = slices.DeleteFunc(q.delayed, in)
	}
}

// FailQueued fails every waiting request with err, in the batcher's
// queues and in the model queue.
func (b *dynamicBatcher) FailQueued(err error) {
	b.failQueued(err)
	b.mv.drainQueue(err)
}

// Ready implements Scheduler.
func (b *dynamicBatcher) Ready() bool { return b.mv.ready() }

// failQueued fails every request waiting in the batcher with err.
func (b *dynamicBatcher) failQueued(err error) {
	b.mu.Lock()
	var all []*stubproc.Request
	for _, q := range b.levels {
		for _, e := range q.queue {
			all = append(all, e.pr)
		}
		for _, e := range q.delayed {
			all = append(all, e.pr)
		}
		q.queue, q.delayed = nil, nil
	}
	b.mu.Unlock()
	for _, pr := range all {
		b.mv.finish(pr, nil, err, true)
	}
}

// Stop ends the batcher; requests still waiting fail, as the model is
// going away.
func (b *dynamicBatcher) Stop() {
	b.mu.Lock()
	already := b.stopped
	b.stopped = true
	b.mu.Unlock()
	if !already {
		close(b.stopc)
	}
	<-b.done
	b.failQueued(b.mv.unloaded())
}
