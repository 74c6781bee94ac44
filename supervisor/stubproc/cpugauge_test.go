package stubproc

import (
	"os"
	"runtime"
	"testing"
	"time"
)

// TestCPUGaugeJudges drives the gauge through samples of a stub's run
// delay and time slices.
func TestCPUGaugeJudges(t *testing.T) {
	type sample struct {
		wait   time.Duration
		slices uint64
		ok     bool
	}
	us := time.Microsecond
	cases := []struct {
		name    string
		samples []sample
		want    bool
	}{
		{"contended until a period was measured", []sample{{100 * us, 10, true}}, true},
		{"short waits per slice: free", []sample{{100 * us, 10, true}, {200 * us, 60, true}}, false},
		{"long waits per slice: contended", []sample{{100 * us, 10, true}, {5100 * us, 60, true}}, true},
		{"a quiet period after a busy one: free", []sample{{0, 0, true}, {5000 * us, 50, true}, {5100 * us, 100, true}}, false},
		{"no slices run: the last judgement stands", []sample{{0, 0, true}, {100 * us, 50, true}, {100 * us, 50, true}}, false},
		{"unreadable figures: contended", []sample{{0, 0, true}, {100 * us, 50, true}, {0, 0, false}}, true},
		{"readable again: measured anew", []sample{{0, 0, false}, {0, 0, true}, {100 * us, 50, true}}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var g cpuGauge
			for _, s := range c.samples {
				g.judge(s.wait, s.slices, s.ok)
			}
			if got := g.contended.Load(); got != c.want {
				t.Fatalf("contended %v, want %v", got, c.want)
			}
		})
	}
}

// TestRunDelayReadsSchedstat reads this process's own figures: on Linux
// they exist and its main thread has run.
func TestRunDelayReadsSchedstat(t *testing.T) {
	_, slices, ok := runDelay(os.Getpid())
	if runtime.GOOS != "linux" {
		if ok {
			t.Fatal("runDelay reported figures off Linux")
		}
		return
	}
	if _, err := os.Stat("/proc/self/schedstat"); err != nil {
		t.Skip("no /proc/self/schedstat (kernel without CONFIG_SCHED_INFO)")
	}
	if !ok || slices == 0 {
		t.Fatalf("runDelay(self) = %d slices, ok %v", slices, ok)
	}
	if _, _, ok := runDelay(-1); ok {
		t.Fatal("runDelay(-1) reported figures")
	}
}

// TestCPUGaugeSamplesOncePerPeriod checks that busy reads the figures at
// most once per gaugePeriod.
func TestCPUGaugeSamplesOncePerPeriod(t *testing.T) {
	var g cpuGauge
	now := time.Now()
	g.busy(os.Getpid(), now)
	next := g.next
	if !next.Equal(now.Add(gaugePeriod)) {
		t.Fatalf("next sample at %v, want %v", next, now.Add(gaugePeriod))
	}
	g.busy(os.Getpid(), now.Add(gaugePeriod/2))
	if !g.next.Equal(next) {
		t.Fatal("sampled again within the period")
	}
	g.busy(os.Getpid(), next)
	if !g.next.Equal(next.Add(gaugePeriod)) {
		t.Fatal("did not sample once the period passed")
	}
}
