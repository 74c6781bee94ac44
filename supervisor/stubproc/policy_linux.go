package stubproc

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// YieldToStubs runs every thread of this process under SCHED_BATCH, so a
// supervisor thread woken by a stub's reply (or by a client) never preempts
// a running stub: on a small machine the stub that is executing a model is
// the scarcer resource, and with the default policy the woken reader used
// to take the stub's CPU for tens of microseconds at every reply. Threads
// created later inherit the policy; stubs do not (the launcher thread that
// forks them runs under the normal policy). CPU shares are unchanged.
func YieldToStubs() error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("yield to stubs: %w", err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetAttr(tid, &unix.SchedAttr{Policy: unix.SCHED_BATCH}, 0); err != nil && err != unix.ESRCH {
			return fmt.Errorf("yield to stubs: thread %d: %w", tid, err)
		}
	}
	return nil
}

// normalPolicy puts the calling thread back under the normal policy; the
// launcher calls it so that stubs, which inherit the policy of the thread
// that forks them, compete for the CPU as ordinary processes.
func normalPolicy() {
	_ = unix.SchedSetAttr(0, &unix.SchedAttr{Policy: unix.SCHED_NORMAL}, 0)
}
