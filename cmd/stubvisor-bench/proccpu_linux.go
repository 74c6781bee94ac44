package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times (100 on every
// Linux the kernel ABI allows).
const clockTick = 10 * time.Millisecond

// treeCPU returns the CPU time (user plus system) the process root and
// all its live descendants have used so far, with the time of their
// waited-for dead children: a server with its stub processes, or uvicorn
// with its workers. Differences between two calls are what a case cost.
func treeCPU(root int) time.Duration {
	type proc struct{ ppid, ticks int64 }
	procs := map[int64]proc{}
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range dirs {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid ... utime(14) stime(15) cutime(16) cstime(17)
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 15 {
			continue
		}
		pid, _ := strconv.ParseInt(string(bytes.Fields(b)[0]), 10, 64)
		var p proc
		p.ppid, _ = strconv.ParseInt(string(f[1]), 10, 64)
		for _, k := range f[11:15] {
			n, _ := strconv.ParseInt(string(k), 10, 64)
			p.ticks += n
		}
		procs[pid] = p
	}
	in := map[int64]bool{int64(root): true}
	var total int64
	for changed := true; changed; {
		changed = false
		for pid, p := range procs {
			if !in[pid] && in[p.ppid] {
				in[pid], changed = true, true
			}
		}
	}
	for pid := range in {
		total += procs[pid].ticks
	}
	return time.Duration(total) * clockTick
}
