package stubproc

import (
	"errors"
	"time"
)

// CPUPolicy is how the supervisor's threads and its stubs compete for the
// CPU with each other and with the node's other processes.
type CPUPolicy string

const (
	// PolicyLatency runs the supervisor and its stubs under the normal
	// policy with a short slice (LatencySlice). A request wakes three
	// threads in turn (the server's, the stub's, the server's again); on a
	// node shared with CPU-bound neighbours each wake-up may then preempt
	// the neighbour at once (Linux's EEVDF lets a thread with a shorter
	// slice preempt on wake-up), where under SCHED_BATCH it can wait out
	// the neighbour's slice. Measured on a 2-vCPU VM it cost 10-20% at c16
	// when quiet and gained nothing consistent beside two busy
	// neighbours, so it is not the default.
	PolicyLatency CPUPolicy = "latency"
	// PolicyBatch runs the supervisor's threads under SCHED_BATCH and its
	// stubs under the normal policy: a supervisor thread woken by a
	// stub's reply never preempts a running stub, which saves a switch on
	// a quiet small machine and costs a neighbour's slice at every
	// wake-up on a busy one.
	PolicyBatch CPUPolicy = "batch"
)

// LatencySlice is the slice of every thread under PolicyLatency: a request's
// CPU work between two waits is tens of microseconds, and the kernel's
// smallest custom slice is 100 µs.
const LatencySlice = 100 * time.Microsecond

// ErrUnknownPolicy is returned by SetCPUPolicy for a policy it does not
// know.
var ErrUnknownPolicy = errors.New("unknown CPU policy (want latency or batch)")
