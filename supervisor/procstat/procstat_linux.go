package procstat

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat and
// /proc/stat. The kernel reports them in USER_HZ, which is 100 on every
// Linux architecture.
const userHZ = 100

var pageSize = uint64(os.Getpagesize())

// Read reads pid's figures. The process may exit between the files it
// reads: a failure wraps the os error (fs.ErrNotExist once it is gone).
func Read(pid int) (Stat, error) {
	st, err := readStat(pid)
	if err != nil {
		return st, err
	}
	n, err := countFDs(pid)
	if err != nil {
		return st, fmt.Errorf("procstat: %w", err)
	}
	st.OpenFDs = n
	return st, nil
}

// CPU reads only pid's CPU time (user plus system, all threads), from
// /proc/<pid>/stat: one small read without Read's listing of
// /proc/<pid>/fd, for a gauge that samples it ten times a second.
func CPU(pid int) (time.Duration, error) {
	st, err := readStat(pid)
	if err != nil {
		return 0, err
	}
	return time.Duration(math.Round(st.CPUSeconds * float64(time.Second))), nil
}

// readStat reads and parses /proc/<pid>/stat.
func readStat(pid int) (Stat, error) {
	var st Stat
	var buf [1024]byte
	b, err := readSmall(fmt.Sprintf("/proc/%d/stat", pid), buf[:])
	if err != nil {
		return st, fmt.Errorf("procstat: %w", err)
	}
	if err := parseStat(b, &st); err != nil {
		return st, fmt.Errorf("procstat: pid %d: %w", pid, err)
	}
	return st, nil
}

// RSS reads only pid's resident set size, from /proc/<pid>/statm: one
// small read, for the status page's once-a-second sample of every stub,
// where the full Read's directory listing of /proc/<pid>/fd would be most
// of an idle server's CPU.
func RSS(pid int) (uint64, error) {
	var buf [128]byte
	path := strconv.AppendInt(append(buf[:0:64], "/proc/"...), int64(pid), 10)
	b, err := readSmall(string(append(path, "/statm"...)), buf[64:])
	if err != nil {
		return 0, fmt.Errorf("procstat: %w", err)
	}
	// statm: size resident shared text lib data dt, in pages.
	fields := bytes.Fields(b)
	if len(fields) < 2 {
		return 0, fmt.Errorf("procstat: pid %d: malformed statm %q", pid, b)
	}
	pages, err := strconv.ParseUint(string(fields[1]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("procstat: pid %d: statm: %w", pid, err)
	}
	return pages * pageSize, nil
}

// IdleTime reads the time the machine's CPUs have been idle since boot
// (idle plus iowait, summed over the CPUs) from the first line of
// /proc/stat. Over a window, with a process tree's CPU time, it tells how
// much CPU the other processes left over.
func IdleTime() (time.Duration, error) {
	var buf [512]byte // the first line of many: one read is enough
	b, err := readSmall("/proc/stat", buf[:])
	if err != nil {
		return 0, fmt.Errorf("procstat: %w", err)
	}
	d, err := parseIdle(b)
	if err != nil {
		return 0, fmt.Errorf("procstat: /proc/stat: %w", err)
	}
	return d, nil
}

// parseIdle takes idle and iowait from the "cpu" line at the start of
// /proc/stat: "cpu user nice system idle iowait ...", in USER_HZ.
func parseIdle(b []byte) (time.Duration, error) {
	line, _, _ := bytes.Cut(b, []byte{'\n'})
	fields := bytes.Fields(line)
	if len(fields) < 6 || string(fields[0]) != "cpu" {
		return 0, fmt.Errorf("malformed first line %q", line)
	}
	var ticks uint64
	for _, f := range fields[4:6] {
		v, err := strconv.ParseUint(string(f), 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// parseStat takes utime, stime, num_threads and rss from the contents of
// /proc/<pid>/stat. The command name (field 2) is in parentheses and may
// hold spaces and parentheses itself, so fields are counted from the last
// ')'.
func parseStat(b []byte, st *Stat) error {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return fmt.Errorf("malformed stat %q", b)
	}
	fields := bytes.Fields(b[i+1:])
	// fields[0] is field 3 (state): field k is fields[k-3].
	const utime, stime, threads, rss = 14, 15, 20, 24
	if len(fields) < rss-2 {
		return fmt.Errorf("stat has %d fields, want at least %d", len(fields)+2, rss)
	}
	num := func(k int) (uint64, error) { return strconv.ParseUint(string(fields[k-3]), 10, 64) }
	u, err1 := num(utime)
	s, err2 := num(stime)
	t, err3 := num(threads)
	r, err4 := strconv.ParseInt(string(fields[rss-3]), 10, 64)
	for _, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			return fmt.Errorf("stat: %w", err)
		}
	}
	st.CPUSeconds = float64(u+s) / userHZ
	st.Threads = int(t)
	if r > 0 {
		st.RSSBytes = uint64(r) * pageSize
	}
	return nil
}

// readSmall reads a /proc file that fits in buf with one read.
func readSmall(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	n, err := unix.Read(fd, buf)
	if err != nil {
		return nil, &os.PathError{Op: "read", Path: path, Err: err}
	}
	return buf[:n], nil
}

// countFDs counts the entries of /proc/<pid>/fd.
func countFDs(pid int) (int, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	for {
		names, err := f.Readdirnames(256)
		n += len(names)
		if err != nil || len(names) == 0 {
			break
		}
	}
	return n, nil
}
