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

// schedUse is what the scheduler accounts to a process tree's live
// threads (/proc/<pid>/task/<tid>/schedstat and status): time on a CPU,
// time runnable but waiting for one (run-queue latency), and context
// switches, voluntary (the thread slept: a wake-up to come) plus
// involuntary (it was preempted); childSwitches are those of the
// descendants alone (a server's stubs, a yardstick's workers). Threads
// that exited are not counted, which over a few seconds of a server's life
// loses little.
type schedUse struct {
	onCPU, runq             time.Duration
	switches, childSwitches int64
}

func (a schedUse) sub(b schedUse) schedUse {
	return schedUse{a.onCPU - b.onCPU, a.runq - b.runq, a.switches - b.switches, a.childSwitches - b.childSwitches}
}

// treeSched sums schedUse over root and its live descendants.
func treeSched(root int) schedUse {
	var u schedUse
	for _, pid := range treePIDs(root) {
		u = u.add(pidSched(pid, pid != root))
	}
	return u
}

// procsSched is schedUse for root and each live descendant apart, by
// name: "server" for root, a stub by its instance's name (its last
// argument), anything else by its pid.
func procsSched(root int) map[string]schedUse {
	out := map[string]schedUse{}
	for _, pid := range treePIDs(root) {
		name := "server"
		if pid != root {
			name = strconv.Itoa(pid)
			if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); err == nil {
				if args := bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0}); len(args) > 1 {
					name = string(args[len(args)-1])
				}
			}
		}
		out[name] = out[name].add(pidSched(pid, pid != root))
	}
	return out
}

// pidSched is schedUse over the threads of one process; a descendant's
// context switches count in childSwitches too.
func pidSched(pid int, descendant bool) schedUse {
	var u schedUse
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/[0-9]*")
	for _, task := range tasks {
		if b, err := os.ReadFile(task + "/schedstat"); err == nil {
			if f := bytes.Fields(b); len(f) >= 2 {
				on, _ := strconv.ParseInt(string(f[0]), 10, 64)
				wait, _ := strconv.ParseInt(string(f[1]), 10, 64)
				u.onCPU += time.Duration(on)
				u.runq += time.Duration(wait)
			}
		}
		if b, err := os.ReadFile(task + "/status"); err == nil {
			for _, line := range bytes.Split(b, []byte("\n")) {
				if bytes.HasPrefix(line, []byte("voluntary_ctxt_switches:")) || bytes.HasPrefix(line, []byte("nonvoluntary_ctxt_switches:")) {
					f := bytes.Fields(line)
					n, _ := strconv.ParseInt(string(f[len(f)-1]), 10, 64)
					u.switches += n
					if descendant {
						u.childSwitches += n
					}
				}
			}
		}
	}
	return u
}

func (a schedUse) add(b schedUse) schedUse {
	return schedUse{a.onCPU + b.onCPU, a.runq + b.runq, a.switches + b.switches, a.childSwitches + b.childSwitches}
}

// treePIDs lists root and its live descendants.
func treePIDs(root int) []int {
	out := []int{root}
	for i := 0; i < len(out); i++ {
		kids, _ := filepath.Glob("/proc/" + strconv.Itoa(out[i]) + "/task/[0-9]*/children")
		for _, k := range kids {
			b, err := os.ReadFile(k)
			if err != nil {
				continue
			}
			for _, f := range bytes.Fields(b) {
				if pid, err := strconv.Atoi(string(f)); err == nil {
					out = append(out, pid)
				}
			}
		}
	}
	return out
}
