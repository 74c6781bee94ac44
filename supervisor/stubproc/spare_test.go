package stubproc

import (
	"runtime"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/ipc"
)

// TestJudgeSpare decides periods of CPU time left to the server tree and
// of executes sent, on two CPUs unless the case says otherwise.
func TestJudgeSpare(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name           string
		wall, left     time.Duration
		sends, crowded int64
		cpus           float64
		want           bool
	}{
		{"one request at a time on a quiet machine", 100 * ms, 150 * ms, 300, 0, 2, true},
		{"the tree's own time counts as left to it", 100 * ms, 125 * ms, 300, 0, 2, true},
		{"neighbours take more than a CPU", 100 * ms, 80 * ms, 300, 0, 2, false},
		{"most executes sent beside others", 100 * ms, 190 * ms, 1000, 950, 2, false},
		{"a few crowded sends are allowed", 100 * ms, 150 * ms, 1000, 100, 2, true},
		{"one more is too many", 100 * ms, 150 * ms, 1000, 101, 2, false},
		{"no executes: the CPU alone decides", 100 * ms, 150 * ms, 0, 0, 2, true},
		{"no time passed", 0, 0, 1, 0, 2, false},
		{"an idle node, but a container limited to one CPU", 100 * ms, 6000 * ms, 300, 0, 1, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := judgeSpare(c.wall, c.left, c.sends, c.crowded, c.cpus); got != c.want {
				t.Fatalf("judgeSpare(%v, %v, %d, %d, %v) = %v, want %v", c.wall, c.left, c.sends, c.crowded, c.cpus, got, c.want)
			}
		})
	}
}

// testProc is a Proc with a real region (no process): what the gauge
// reads and writes of a stub.
func testProc(t *testing.T) *Proc {
	t.Helper()
	conn, err := ipc.Create("stubvisor:spare-test", ipc.DefaultSettings())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.MarkDead(); conn.Close() })
	return &Proc{conn: conn, pid: -1}
}

// TestSpareGrantsToAStubSentTwiceInARow checks who holds the longer
// poll: a stub sent two executes in a row while a CPU is spare, one stub
// at a time, and none once sends go to another stub or the CPU is no
// longer spare.
func TestSpareGrantsToAStubSentTwiceInARow(t *testing.T) {
	g := spareGauge{procs: map[*Proc]time.Duration{}}
	spin := 50 * time.Microsecond
	long := sparePollFactor * spin
	a, b := testProc(t), testProc(t)
	g.add(a)
	g.add(b)
	now := time.Now()
	g.next = now.Add(time.Hour) // no sampling: the test sets the judgement
	steps := []struct {
		name  string
		spare bool
		to    *Proc
		a, b  time.Duration
	}{
		{"no CPU spare", false, a, 0, 0},
		{"no CPU spare, a again", false, a, 0, 0},
		{"spare, a again", true, a, long, 0},
		{"a once more: unchanged", true, a, long, 0},
		{"b: sends go round", true, b, 0, 0},
		{"b again", true, b, 0, long},
		{"a: taken back from b", true, a, 0, 0},
		{"a again", true, a, long, 0},
	}
	for _, st := range steps {
		g.spare.Store(st.spare)
		g.grant(st.to, spin, now)
		if got := [2]time.Duration{a.conn.MsgPoll(), b.conn.MsgPoll()}; got != [2]time.Duration{st.a, st.b} {
			t.Fatalf("%s: polls %v, want [%v %v]", st.name, got, st.a, st.b)
		}
	}
	g.spare.Store(false)
	g.grant(a, spin, now)
	if a.conn.MsgPoll() != 0 || g.holder.Load() != nil {
		t.Fatal("the longer poll kept once no CPU was spare")
	}
	g.remove(a)
	g.remove(b)
	if g.last.Load() != nil {
		t.Fatal("a removed stub is still the last one sent to")
	}
}

// TestSpareCountsCrowdedSends checks that a send counts as crowded once
// more executes are in flight than leave a CPU over, and that done
// takes them back.
func TestSpareCountsCrowdedSends(t *testing.T) {
	g := spareGauge{procs: map[*Proc]time.Duration{}}
	g.cpus.Store(3)
	free := int64(2)
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

// TestSpareSamplesOncePerPeriod checks that grant reads the figures at
// most once per sparePeriod.
func TestSpareSamplesOncePerPeriod(t *testing.T) {
	g := spareGauge{procs: map[*Proc]time.Duration{}}
	p := testProc(t)
	now := time.Now()
	g.grant(p, time.Millisecond, now)
	next := g.next
	if !next.Equal(now.Add(sparePeriod)) {
		t.Fatalf("next sample at %v, want %v", next, now.Add(sparePeriod))
	}
	if p.conn.MsgPoll() != 0 {
		t.Fatal("granted before any period was measured")
	}
	g.grant(p, time.Millisecond, now.Add(sparePeriod/2))
	if !g.next.Equal(next) {
		t.Fatal("sampled again within the period")
	}
	g.grant(p, time.Millisecond, next)
	if !g.next.Equal(next.Add(sparePeriod)) {
		t.Fatal("did not sample once the period passed")
	}
}

// TestSelfCPU reads this process's CPU time: on Linux it grows with the
// CPU the process burns. (The machine's idle time and the stubs' CPU time
// come from procstat, tested there.)
func TestSelfCPU(t *testing.T) {
	self0 := selfCPU()
	if runtime.GOOS != "linux" {
		if self0 != 0 {
			t.Fatal("a figure reported off Linux")
		}
		return
	}
	// Burn 60 ms of CPU, however long a loaded machine makes that take.
	for end := time.Now().Add(10 * time.Second); selfCPU()-self0 < 60*time.Millisecond; {
		if time.Now().After(end) {
			t.Fatalf("selfCPU grew by only %v in 10 s of burning", selfCPU()-self0)
		}
	}
}
