package stubproc

import (
	"os"
	"runtime"
	"testing"
	"time"
)

// TestJudgeSpare decides periods of CPU time left to the server tree and
// of executes sent.
func TestJudgeSpare(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name           string
		wall, left     time.Duration
		sends, crowded int64
		want           bool
	}{
		{"one request at a time on a quiet machine", 100 * ms, 150 * ms, 300, 0, true},
		{"the tree's own time counts as left to it", 100 * ms, 125 * ms, 300, 0, true},
		{"neighbours take more than a CPU", 100 * ms, 80 * ms, 300, 0, false},
		{"most executes sent beside others", 100 * ms, 190 * ms, 1000, 950, false},
		{"a few crowded sends are allowed", 100 * ms, 150 * ms, 1000, 100, true},
		{"one more is too many", 100 * ms, 150 * ms, 1000, 101, false},
		{"no executes: the CPU alone decides", 100 * ms, 150 * ms, 0, 0, true},
		{"no time passed", 0, 0, 1, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := judgeSpare(c.wall, c.left, c.sends, c.crowded); got != c.want {
				t.Fatalf("judgeSpare(%v, %v, %d, %d) = %v, want %v", c.wall, c.left, c.sends, c.crowded, got, c.want)
			}
		})
	}
}

// TestSpareCountsCrowdedSends checks that a send counts as crowded once
// more executes are in flight than leave a CPU over, and that done
// takes them back.
func TestSpareCountsCrowdedSends(t *testing.T) {
	g := spareGauge{procs: map[*Proc]time.Duration{}}
	free := int64(max(runtime.NumCPU()-1, 1))
	for range free {
		g.sent()
	}
	if c := g.crowded.Load(); c != 0 {
		t.Fatalf("%d crowded sends among the first %d", c, free)
	}
	g.sent()
	if c, s := g.crowded.Load(), g.sends.Load(); c != 1 || s != free+1 {
		t.Fatalf("crowded %d of %d sends, want 1 of %d", c, s, free+1)
	}
	g.done(int(free) + 1)
	if n := g.executing.Load(); n != 0 {
		t.Fatalf("%d executes in flight after all were done", n)
	}
}

// TestSpareSamplesOncePerPeriod checks that msgPoll reads the figures at
// most once per sparePeriod, and that it allows the longer poll only once
// a period was judged spare.
func TestSpareSamplesOncePerPeriod(t *testing.T) {
	g := spareGauge{procs: map[*Proc]time.Duration{}}
	now := time.Now()
	if d := g.msgPoll(time.Millisecond, now); d != 0 {
		t.Fatalf("longer poll %v before any period was measured", d)
	}
	next := g.next
	if !next.Equal(now.Add(sparePeriod)) {
		t.Fatalf("next sample at %v, want %v", next, now.Add(sparePeriod))
	}
	g.msgPoll(time.Millisecond, now.Add(sparePeriod/2))
	if !g.next.Equal(next) {
		t.Fatal("sampled again within the period")
	}
	g.spare.Store(true)
	if d := g.msgPoll(time.Millisecond, now.Add(sparePeriod/2)); d != sparePollFactor*time.Millisecond {
		t.Fatalf("longer poll %v while spare, want %v", d, sparePollFactor*time.Millisecond)
	}
}

// TestCPUTimesReadProc reads this machine's and this process's figures:
// on Linux they exist, and this process's grow with the CPU it burns.
func TestCPUTimesReadProc(t *testing.T) {
	idle0, ok := systemCPU()
	self0 := selfCPU()
	proc0, pok := procCPU(os.Getpid())
	if runtime.GOOS != "linux" {
		if ok || pok {
			t.Fatal("figures reported off Linux")
		}
		return
	}
	if !ok || !pok {
		t.Fatalf("systemCPU ok %v, procCPU(self) ok %v", ok, pok)
	}
	// Burn 60 ms of CPU, however long a loaded machine makes that take.
	for end := time.Now().Add(10 * time.Second); selfCPU()-self0 < 60*time.Millisecond; {
		if time.Now().After(end) {
			t.Fatalf("selfCPU grew by only %v in 10 s of burning", selfCPU()-self0)
		}
	}
	idle1, _ := systemCPU()
	proc1, _ := procCPU(os.Getpid())
	if idle1 < idle0 {
		t.Fatalf("the machine's idle time fell from %v to %v", idle0, idle1)
	}
	if proc1 <= proc0 {
		t.Fatalf("procCPU(self) did not grow over 60 ms of CPU (%v, then %v)", proc0, proc1)
	}
	if _, ok := procCPU(-1); ok {
		t.Fatal("procCPU(-1) reported figures")
	}
}
