package supervisor

import (
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/supervisor/sched"
)

// stats accumulates the statistics extension's figures for one model
// version. inference_count counts batch elements, execution_count counts
// model executions, as Triton does.
type stats struct {
	mu             sync.Mutex
	last           time.Time
	inferenceCount uint64
	executionCount uint64
	infer          backendapi.InferStats
	batches        map[uint64]*backendapi.BatchStats
}

// requestDone records one finished request.
func (s *stats) requestDone(err error, batch int64, total, queue, compute time.Duration) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = now
	if err != nil {
		s.infer.Fail.Observe(total)
		s.infer.FailReasons[failureReason(err)]++
		return
	}
	s.inferenceCount += uint64(batch)
	s.infer.Success.Observe(total)
	s.infer.Queue.Observe(queue)
	s.infer.ComputeInfer.Observe(compute)
}

// cacheHit records a request answered from the response cache: a success
// with its duration; not an inference or an execution, as in Triton.
func (s *stats) cacheHit(total time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = time.Now()
	s.infer.Success.Observe(total)
}

// executionDone records one model execution of size requests.
func (s *stats) executionDone(size int64, input, infer, output time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.executionCount++
	if s.batches == nil {
		s.batches = map[uint64]*backendapi.BatchStats{}
	}
	b := s.batches[uint64(size)]
	if b == nil {
		b = &backendapi.BatchStats{BatchSize: uint64(size)}
		s.batches[uint64(size)] = b
	}
	b.ComputeInput.Observe(input)
	b.ComputeInfer.Observe(infer)
	b.ComputeOutput.Observe(output)
	s.infer.ComputeInput.Total += input
	s.infer.ComputeInput.Count++
	s.infer.ComputeOutput.Total += output
	s.infer.ComputeOutput.Count++
}

func (s *stats) snapshot(name, version string) backendapi.ModelStatistics {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := backendapi.ModelStatistics{
		Name: name, Version: version, LastInference: s.last,
		InferenceCount: s.inferenceCount, ExecutionCount: s.executionCount, Inference: s.infer,
	}
	for _, b := range s.batches {
		out.Batches = append(out.Batches, *b)
	}
	sort.Slice(out.Batches, func(i, j int) bool { return out.Batches[i].BatchSize < out.Batches[j].BatchSize })
	return out
}

// failureReason classifies a failed request for nv_inference_request_failure:
// the scheduler's refusals are REJECTED, cancellations CANCELED, and every
// other failure of a request that reached the model BACKEND.
func failureReason(err error) backendapi.FailureReason {
	switch {
	case backendapi.CodeOf(err) == backendapi.Cancelled:
		return backendapi.FailureCanceled
	case errors.Is(err, sched.ErrQueueFull), errors.Is(err, sched.ErrTimeoutExpired):
		return backendapi.FailureRejected
	}
	return backendapi.FailureBackend
}

// successTotals returns how many requests succeeded and their summed
// latency.
func (s *stats) successTotals() (uint64, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.infer.Success.Count, s.infer.Success.Total
}
