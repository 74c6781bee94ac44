package main

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMeasureWakeCost plays the ping-pong on one CPU and, where two are
// allowed, across two: round trips complete, and both threads together
// use some CPU per wake-up but no more than a round trip of wall time
// (two threads, two wake-ups each round trip).
func TestMeasureWakeCost(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("the players need a P each")
	}
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		t.Fatal(err)
	}
	var cpus []int
	for c := 0; c < len(allowed)*64; c++ {
		if allowed.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	const d = 50 * time.Millisecond
	pairs := map[string][2]int{"same CPU": {cpus[0], cpus[0]}}
	if len(cpus) > 1 {
		pairs["across CPUs"] = [2]int{cpus[0], cpus[1]}
	}
	for name, pair := range pairs {
		t.Run(name, func(t *testing.T) {
			c, err := measureWakeCost(pair[0], pair[1], d)
			if err != nil {
				t.Fatal(err)
			}
			if c.rtt <= 0 || c.cpuPerWake <= 0 || c.cpuPerWake > c.rtt {
				t.Fatalf("round trip %v, CPU per wake-up %v over %v", c.rtt, c.cpuPerWake, d)
			}
		})
	}
	line, err := wakeCostLine()
	if err != nil || !strings.HasPrefix(line, "machine wake same_cpu_rtt_us=") {
		t.Fatalf("wakeCostLine() = %q, %v", line, err)
	}
}
