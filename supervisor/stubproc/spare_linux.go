package stubproc

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// selfCPU returns this process's CPU time, all threads.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// quotaFiles locates this process's CPU quota once: cgroup v2's cpu.max,
// or cgroup v1's cpu.cfs_quota_us beside cpu.cfs_period_us.
var quotaFiles = sync.OnceValue(func() []string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil
	}
	return cgroupQuotaFiles(string(b), func(p string) bool { _, err := os.Stat(p); return err == nil })
})

// cgroupQuotaFiles returns, from /proc/self/cgroup's text, the files that
// hold the CPU quota of the process's cgroup: one cpu.max (v2), or a
// cpu.cfs_quota_us and its cpu.cfs_period_us (v1); none when exists finds
// neither.
func cgroupQuotaFiles(procCgroup string, exists func(string) bool) []string {
	for line := range strings.Lines(procCgroup) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		controllers, path := parts[1], parts[2]
		if controllers == "" { // v2 (or the v2 part of a hybrid setup)
			for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
				if f := filepath.Join(root, path, "cpu.max"); exists(f) {
					return []string{f}
				}
			}
			continue
		}
		if !slices.Contains(strings.Split(controllers, ","), "cpu") {
			continue
		}
		dir := filepath.Join("/sys/fs/cgroup", controllers, path)
		if !exists(dir) {
			dir = filepath.Join("/sys/fs/cgroup/cpu", path)
		}
		if q := filepath.Join(dir, "cpu.cfs_quota_us"); exists(q) {
			return []string{q, filepath.Join(dir, "cpu.cfs_period_us")}
		}
	}
	return nil
}

// affinityCPUs counts the CPUs the calling thread may run on (taskset, a
// cpuset): the server's threads and its stubs inherit the process's. It is
// read at each sample, so that a later taskset -a -p is followed.
func affinityCPUs() (n int, ok bool) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0, false
	}
	return set.Count(), true
}

// cpuQuota returns the CPUs this process's cgroup may use per second, if
// it has a quota.
func cpuQuota() (cpus float64, ok bool) {
	files := quotaFiles()
	var texts []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return 0, false
		}
		texts = append(texts, string(b))
	}
	return parseQuota(texts)
}

// parseQuota reads a cgroup's CPU quota: ["<quota|max> <period>"] (v2's
// cpu.max) or ["<quota|-1>", "<period>"] (v1's two files).
func parseQuota(texts []string) (cpus float64, ok bool) {
	var quota, period string
	switch len(texts) {
	case 1:
		f := strings.Fields(texts[0])
		if len(f) != 2 {
			return 0, false
		}
		quota, period = f[0], f[1]
	case 2:
		quota, period = strings.TrimSpace(texts[0]), strings.TrimSpace(texts[1])
	default:
		return 0, false
	}
	q, err1 := strconv.ParseFloat(quota, 64)
	p, err2 := strconv.ParseFloat(period, 64)
	if err1 != nil || err2 != nil || q <= 0 || p <= 0 { // "max", -1: no quota
		return 0, false
	}
	return q / p, true
}
