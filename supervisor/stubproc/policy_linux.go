package stubproc

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// SetCPUPolicy puts every thread of this process under policy and makes
// the launcher (NewLauncher, called after this) fork stubs under policy's
// stub side. Threads created later inherit the policy of the thread that
// creates them. CPU shares (nice levels) are unchanged, and nothing here
// needs a privilege.
func SetCPUPolicy(policy CPUPolicy) error {
	own, stub, err := policyAttrs(policy)
	if err != nil {
		return err
	}
	stubAttr = stub
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("cpu policy %s: %w", policy, err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetAttr(tid, &own, 0); err != nil && err != unix.ESRCH {
			return fmt.Errorf("cpu policy %s: thread %d: %w", policy, tid, err)
		}
	}
	return nil
}

// policyAttrs returns the scheduling attributes of the supervisor's threads
// and of its stubs under policy.
func policyAttrs(policy CPUPolicy) (own, stub unix.SchedAttr, err error) {
	normal := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL}
	switch policy {
	case PolicyLatency:
		// sched_runtime is the EEVDF slice of a SCHED_NORMAL thread
		// (Linux 6.12 on; older kernels ignore it for this policy).
		normal.Runtime = uint64(LatencySlice.Nanoseconds())
		return normal, normal, nil
	case PolicyBatch:
		batch := normal
		batch.Policy = unix.SCHED_BATCH
		return batch, normal, nil
	}
	return normal, normal, fmt.Errorf("cpu policy %q: %w", policy, ErrUnknownPolicy)
}

// stubAttr is what the launcher thread runs under, so the stubs it forks
// inherit it: the normal policy until SetCPUPolicy says more.
var stubAttr = unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL}

// stubPolicy puts the calling thread (the launcher's) under the stubs'
// policy: stubs inherit the policy and slice of the thread that forks them.
func stubPolicy() {
	attr := stubAttr
	_ = unix.SchedSetAttr(0, &attr, 0)
}
