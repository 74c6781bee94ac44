package ipc

import (
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The shared (not FUTEX_PRIVATE_FLAG) operations: the words live in a
// mapping two processes share.
const (
	futexWait = 0
	futexWake = 1
)

// futexWaitOn sleeps while *addr == val, for at most d. Spurious returns
// are fine: every caller re-checks its condition.
func futexWaitOn(addr *uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWait, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWakeAll wakes every waiter on addr.
func futexWakeAll(addr *uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWake, uintptr(0x7fffffff), 0, 0, 0)
}

// getppid is checked by a stub between sleep slices: a changed parent
// means the supervisor died.
func getppid() int { return os.Getppid() }
