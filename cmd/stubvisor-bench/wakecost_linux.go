package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// What a wake-up costs on this machine: the yardstick behind every figure
// that crosses from one process to another. Each request to a stub wakes a
// sleeping thread at least once when the stub or the server had nothing
// to do, and what that costs is a property of the machine, not of
// stubvisor. On bare metal a wake-up to another CPU costs a few
// microseconds; on a VM whose idle vCPUs halt without polling
// (cpuidle-haltpoll with guest_halt_poll_ns=0), the inter-processor
// interrupt that wakes one exits to the hypervisor and costs tens of
// microseconds of CPU. Printing it beside the figures tells a reader which
// machine they came from.

// wakeCost is one ping-pong measurement: two threads pinned to the given
// CPUs hand a futex word back and forth, each sleeping until the other
// wakes it.
type wakeCost struct {
	rtt        time.Duration // one round trip: two wake-ups
	cpuPerWake time.Duration // CPU time of both threads per wake-up
}

// measureWakeCost runs the ping-pong between CPUs a and b (the same CPU
// for a context switch without an inter-processor interrupt) for about d.
func measureWakeCost(a, b int, d time.Duration) (wakeCost, error) {
	var word atomic.Uint32 // 0: a's turn, 1: b's turn, 2: stop
	type result struct {
		cpu   time.Duration
		trips int
		err   error
	}
	results := make(chan result, 2)
	player := func(cpu int, mine, theirs uint32, lead bool) {
		runtime.LockOSThread() // the thread ends with the goroutine
		var r result
		defer func() { results <- r }()
		var set unix.CPUSet
		set.Set(cpu)
		if r.err = unix.SchedSetaffinity(0, &set); r.err != nil {
			word.Store(2)
			futexWake(&word)
			return
		}
		start := threadCPU()
		deadline := time.Now().Add(d)
		for {
			for w := word.Load(); w != mine; w = word.Load() {
				if w == 2 {
					r.cpu = threadCPU() - start
					return
				}
				futexWait(&word, w)
			}
			r.trips++
			next := theirs
			if lead && r.trips%64 == 0 && time.Now().After(deadline) {
				next = 2
			}
			word.Store(next)
			futexWake(&word)
			if next == 2 {
				r.cpu = threadCPU() - start
				return
			}
		}
	}
	began := time.Now()
	go player(a, 0, 1, true)
	go player(b, 1, 0, false)
	r1, r2 := <-results, <-results
	elapsed := time.Since(began)
	if err := errors.Join(r1.err, r2.err); err != nil {
		return wakeCost{}, fmt.Errorf("wake cost: pin to CPUs %d and %d: %w", a, b, err)
	}
	trips := max(r1.trips, r2.trips)
	if trips == 0 {
		return wakeCost{}, errors.New("wake cost: no round trip completed")
	}
	return wakeCost{
		rtt:        elapsed / time.Duration(trips),
		cpuPerWake: (r1.cpu + r2.cpu) / time.Duration(2*trips),
	}, nil
}

// FUTEX_WAIT and FUTEX_WAKE with FUTEX_PRIVATE_FLAG: the word is this
// process's own.
const (
	futexWaitPrivate = 0 | 128
	futexWakePrivate = 1 | 128
)

// futexWait sleeps while *w == val, at most 100 ms: a wake-up that came
// before the sleep is then only late, never lost for good. It is a raw
// system call, so the runtime does not hand the thread's P to another
// thread meanwhile (which would add its own wake-ups to the figure); each
// player keeps a P, hence measureWakeCost needs GOMAXPROCS of at least 2.
func futexWait(w *atomic.Uint32, val uint32) {
	ts := unix.NsecToTimespec(int64(100 * time.Millisecond))
	unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWaitPrivate, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

func futexWake(w *atomic.Uint32) {
	unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWakePrivate, 1, 0, 0, 0)
}

// threadCPU is the calling thread's CPU time (user plus system).
func threadCPU() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_THREAD, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// printWakeCost prints the machine's wake-up costs as one line (see
// wakeCostLine), measured while nothing else of the bench runs.
func printWakeCost() {
	line, err := wakeCostLine()
	if err != nil {
		line = fmt.Sprintf("machine wake error=%q", err.Error())
	}
	fmt.Println(line)
}

// wakeCostLine measures the round trip and the CPU per wake-up on one CPU
// and across the first two this process may use, for 300 ms each, and
// names the guest halt-poll setting where the kernel has one.
func wakeCostLine() (string, error) {
	if runtime.GOMAXPROCS(0) < 2 {
		return "machine wake skipped=GOMAXPROCS<2", nil
	}
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		return "", fmt.Errorf("wake cost: %w", err)
	}
	var cpus []int
	for c := 0; c < len(allowed)*64 && len(cpus) < 2; c++ {
		if allowed.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	pairs := [][2]int{{cpus[0], cpus[0]}} // one CPU, then across two
	if len(cpus) > 1 {
		pairs = append(pairs, [2]int{cpus[0], cpus[1]})
	}
	line := "machine wake"
	for i, pair := range pairs {
		c, err := measureWakeCost(pair[0], pair[1], 300*time.Millisecond)
		if err != nil {
			return "", err
		}
		name := [...]string{"same_cpu", "cross_cpu"}[i]
		line += fmt.Sprintf(" %s_rtt_us=%.1f %s_us_per_wake=%.1f", name, us(c.rtt), name, us(c.cpuPerWake))
	}
	if b, err := os.ReadFile("/sys/module/haltpoll/parameters/guest_halt_poll_ns"); err == nil {
		line += " guest_halt_poll_ns=" + strings.TrimSpace(string(b))
	}
	return line, nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
