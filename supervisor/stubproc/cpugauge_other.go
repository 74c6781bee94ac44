//go:build !linux

package stubproc

import "time"

// runDelay is unknown off Linux: the gauge counts the CPUs as contended.
func runDelay(pid int) (wait time.Duration, slices uint64, ok bool) {
	return 0, 0, false
}
