package stubproc

import (
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestAffinityCPUs counts the CPUs the calling thread may run on, and
// follows a change of its affinity (as taskset -a -p makes): a sample
// taken on a thread pinned to one CPU bounds the gauge's CPUs to one.
func TestAffinityCPUs(t *testing.T) {
	// Never unlocked: the thread, pinned below, ends with the test's
	// goroutine instead of going back to the runtime's pool.
	runtime.LockOSThread()
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	n, ok := affinityCPUs()
	if !ok || n != all.Count() || n < 1 {
		t.Fatalf("affinityCPUs() = %d, %v; want %d", n, ok, all.Count())
	}
	var one unix.CPUSet
	for c := 0; ; c++ {
		if all.IsSet(c) {
			one.Set(c)
			break
		}
	}
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Fatal(err)
	}
	if n, ok := affinityCPUs(); !ok || n != 1 {
		t.Fatalf("pinned to one CPU: affinityCPUs() = %d, %v", n, ok)
	}
	g := spareGauge{procs: map[*Proc]time.Duration{}}
	g.sample(time.Now())
	if n := g.cpus.Load(); n != 1 {
		t.Fatalf("a sample on a thread pinned to one CPU counts %d CPUs (GOMAXPROCS %d)", n, runtime.GOMAXPROCS(0))
	}
}

// TestCgroupQuota finds and reads a cgroup's CPU quota, v2 and v1.
func TestCgroupQuota(t *testing.T) {
	files := []struct {
		name, procCgroup string
		present          []string
		want             []string
	}{
		{"v2", "0::/kubepods/pod1/c1\n", []string{"/sys/fs/cgroup/kubepods/pod1/c1/cpu.max"},
			[]string{"/sys/fs/cgroup/kubepods/pod1/c1/cpu.max"}},
		{"v2 in a hybrid setup", "3:cpu,cpuacct:/\n0::/user.slice\n", []string{"/sys/fs/cgroup/unified/user.slice/cpu.max"},
			[]string{"/sys/fs/cgroup/unified/user.slice/cpu.max"}},
		{"v1", "4:memory:/x\n2:cpu,cpuacct:/docker/abc\n", []string{"/sys/fs/cgroup/cpu,cpuacct/docker/abc", "/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us"},
			[]string{"/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us"}},
		{"v1 mounted as cpu", "1:cpu:/svtest\n", []string{"/sys/fs/cgroup/cpu/svtest/cpu.cfs_quota_us"},
			[]string{"/sys/fs/cgroup/cpu/svtest/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/svtest/cpu.cfs_period_us"}},
		{"cpuacct alone is not cpu", "2:cpuacct:/a\n", []string{"/sys/fs/cgroup/cpuacct/a/cpu.cfs_quota_us"}, nil},
		{"no controller file", "0::/\n", nil, nil},
	}
	for _, c := range files {
		t.Run(c.name, func(t *testing.T) {
			got := cgroupQuotaFiles(c.procCgroup, func(p string) bool { return slices.Contains(c.present, p) })
			if !slices.Equal(got, c.want) {
				t.Fatalf("files %q, want %q", got, c.want)
			}
		})
	}
	quotas := []struct {
		name  string
		texts []string
		cpus  float64
		ok    bool
	}{
		{"v2 limit", []string{"150000 100000\n"}, 1.5, true},
		{"v2 no limit", []string{"max 100000\n"}, 0, false},
		{"v1 limit", []string{"200000\n", "100000\n"}, 2, true},
		{"v1 no limit", []string{"-1\n", "100000\n"}, 0, false},
		{"garbage", []string{"x"}, 0, false},
		{"no files", nil, 0, false},
	}
	for _, c := range quotas {
		t.Run(c.name, func(t *testing.T) {
			if cpus, ok := parseQuota(c.texts); cpus != c.cpus || ok != c.ok {
				t.Fatalf("parseQuota(%q) = %v, %v, want %v, %v", c.texts, cpus, ok, c.cpus, c.ok)
			}
		})
	}
}
