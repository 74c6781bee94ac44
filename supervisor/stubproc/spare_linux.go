package stubproc

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"
)

// clockTick is the unit of /proc's CPU times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// systemCPU returns the machine's idle time, summed over its CPUs, from
// the first line of /proc/stat.
func systemCPU() (idle time.Duration, ok bool) {
	var buf [512]byte
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, false
	}
	n, _ := f.Read(buf[:])
	f.Close()
	line, _, _ := bytes.Cut(buf[:n], []byte{'\n'})
	fields := bytes.Fields(line)
	if len(fields) < 6 || string(fields[0]) != "cpu" {
		return 0, false
	}
	for i, f := range fields[1:6] { // user nice system idle iowait
		v, err := strconv.ParseUint(string(f), 10, 64)
		if err != nil {
			return 0, false
		}
		if i == 3 || i == 4 {
			idle += time.Duration(v) * clockTick
		}
	}
	return idle, true
}

// selfCPU returns this process's CPU time, all threads.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU returns process pid's CPU time, all threads, from
// /proc/<pid>/stat (utime and stime, its 14th and 15th fields).
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseUint(string(f[11]), 10, 64)
	s, err2 := strconv.ParseUint(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+s) * clockTick, true
}
