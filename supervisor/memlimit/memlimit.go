// Package memlimit puts a hard memory limit on a stub process, enforced by
// the kernel, and tells afterwards whether the stub died for crossing it.
//
// Where the server may create one, each limited stub runs in its own
// cgroup v2 child with memory.max set (and no swap): the kernel's OOM
// killer ends the stub and counts the kill in memory.events. Elsewhere
// (cgroup v1 or hybrid hosts, no delegation) the stub gets RLIMIT_DATA,
// which bounds its private memory (heap, anonymous mappings, thread
// stacks) but not the shared-memory rings it maps; an allocation over it
// fails, and the Python stub exits with ExitOverLimit on the MemoryError.
// RLIMIT_AS (every mapping, the rings included) is available on request.
package memlimit

import (
	"errors"
	"fmt"
)

// Method is how a limit is enforced.
type Method string

// The methods, best first.
const (
	CgroupV2   Method = "cgroup-v2"
	RlimitData Method = "rlimit-data"
	RlimitAS   Method = "rlimit-as"
)

// ExitOverLimit is the exit status of a stub whose allocation failed under
// an rlimit (the Python stub's _EXIT_OVER_MEMORY).
const ExitOverLimit = 86

// EnvRlimit names the environment variable that tells the stub an rlimit
// is set, and to which limit in bytes.
const EnvRlimit = "STUBVISOR_MEMORY_RLIMIT"

// ErrUnsupported is returned where no method is available.
var ErrUnsupported = errors.New("memlimit: no memory limit method on this system")

// Limiter creates the limits of the stubs of one server.
type Limiter struct {
	method Method
	// why says why the method was chosen (why cgroup v2 is not used).
	why string
	// parent is the cgroup directory the stubs' cgroups are made in.
	parent string
	seq    uint64
}

// Method returns how this Limiter enforces limits.
func (l *Limiter) Method() Method { return l.method }

// Reason says why Method was chosen, for the log.
func (l *Limiter) Reason() string { return l.why }

// Limit is one stub's limit: Prepare it before the stub starts, call
// Started with its pid, ask OverLimit after it exited, and Close it.
type Limit struct {
	l     *Limiter
	bytes uint64
	dir   string // the stub's cgroup (CgroupV2)
	fd    int    // dir opened, for clone into it; -1 once closed
}

// Bytes is the limit.
func (lim *Limit) Bytes() uint64 { return lim.bytes }

// Method is how the limit is enforced.
func (lim *Limit) Method() Method { return lim.l.method }

// Describe is the limit for messages: "512 MiB (cgroup-v2)".
func (lim *Limit) Describe() string {
	return fmt.Sprintf("%d MiB (%s)", lim.bytes>>20, lim.l.method)
}
