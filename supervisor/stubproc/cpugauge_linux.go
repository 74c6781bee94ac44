package stubproc

import (
	"bytes"
	"os"
	"strconv"
	"time"
)

// runDelay returns the time the main thread of process pid has waited
// for a CPU and the number of time slices it ran, from
// /proc/<pid>/schedstat (CONFIG_SCHED_INFO).
func runDelay(pid int) (wait time.Duration, slices uint64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/schedstat")
	if err != nil {
		return 0, 0, false
	}
	f := bytes.Fields(b)
	if len(f) < 3 {
		return 0, 0, false
	}
	w, err1 := strconv.ParseInt(string(f[1]), 10, 64)
	n, err2 := strconv.ParseUint(string(f[2]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return time.Duration(w), n, true
}
