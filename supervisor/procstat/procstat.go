// Package procstat reads what a process costs the machine (resident
// memory, CPU time, open file descriptors and threads) from /proc, and
// the machine's idle time beside it. A read is two small files and one
// directory listing; RSS or CPU alone is one small file, cheap enough to
// take for every stub several times a second.
package procstat

import "errors"

// Stat is one reading of a process.
type Stat struct {
	// RSSBytes is the resident set size.
	RSSBytes uint64
	// CPUSeconds is the user plus system CPU time the process has used.
	CPUSeconds float64
	// OpenFDs is the number of open file descriptors.
	OpenFDs int
	// Threads is the number of threads.
	Threads int
}

// ErrUnsupported is returned where the system has no /proc to read.
var ErrUnsupported = errors.New("procstat: not supported on this system")
