package main

// The recycling soak (make soak-recycle; not part of make test): the leak
// model serves mixed load for STUBVISOR_SOAK_RECYCLE (a duration, e.g.
// 5m) with MAX_RSS_MB recycling it and MEMORY_LIMIT_MB above that; once a
// minute a request asks for more than the hard limit, an intended kill.
// It checks that no other request fails, that the model's RSS stays under
// its hard limit, and that the server's own RSS and fds stay flat. (A
// shorter run kills three times in all.)

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
	"github.com/stubvisor/stubvisor/supervisor/procstat"
)

func TestSoakRecycle(t *testing.T) {
	spec := os.Getenv("STUBVISOR_SOAK_RECYCLE")
	if spec == "" {
		t.Skip("set STUBVISOR_SOAK_RECYCLE=5m (make soak-recycle) to run the recycling soak")
	}
	duration, err := time.ParseDuration(spec)
	if err != nil {
		t.Fatalf("STUBVISOR_SOAK_RECYCLE=%q: %v", spec, err)
	}
	ipctest.RequirePython(t)
	const maxRSS, hardMB = 150, 400
	s := startServer(t, leakRepo(t, map[string]string{
		"MAX_RSS_MB": strconv.Itoa(maxRSS), "MEMORY_LIMIT_MB": strconv.Itoa(hardMB),
	}), "--stub-restart-backoff", "50ms")
	serverPID := s.cmd.Process.Pid

	var ok, intended, failed atomic.Int64
	var firstFailure atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	request := func(mb int) {
		good, body := leakInfer(s, mb)
		switch {
		case good:
			ok.Add(1)
		case strings.Contains(body, "over memory limit"):
			intended.Add(1)
		default:
			failed.Add(1)
			firstFailure.CompareAndSwap(nil, body)
		}
	}
	paced := func(mb int, every time.Duration) {
		defer wg.Done()
		tk := time.NewTicker(every) // the load's pace, not a synchronisation
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				request(mb)
			}
		}
	}
	wg.Add(5)
	go paced(4, 50*time.Millisecond)                   // the leak: 80 MiB/s
	go paced(hardMB+200, min(time.Minute, duration/3)) // the intended kill
	for range 3 {                                      // load that leaks nothing
		go paced(0, 2*time.Millisecond)
	}

	// The server's own figures once warm, then at the end; the model's
	// RSS every second.
	var maxModelRSS uint64
	var recycles int
	warm := time.Now().Add(duration / 10)
	var first procstat.Stat
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	end := time.Now().Add(duration)
	for now := time.Now(); now.Before(end); now = <-tick.C {
		st := recycleStub(t, s, "leak")
		maxModelRSS = max(maxModelRSS, st.RSS)
		recycles = st.Recycles
		if first.RSSBytes == 0 && now.After(warm) {
			if first, err = procstat.Read(serverPID); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	last, err := procstat.Read(serverPID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d requests served, %d intended kills, %d failed; %d recycles; model RSS peak %d MiB (limit %d); server RSS %d -> %d MiB, fds %d -> %d, threads %d -> %d",
		duration, ok.Load(), intended.Load(), failed.Load(), recycles, maxModelRSS>>20, hardMB,
		first.RSSBytes>>20, last.RSSBytes>>20, first.OpenFDs, last.OpenFDs, first.Threads, last.Threads)
	if intended.Load() == 0 {
		t.Errorf("no intended kill happened")
	}
	if n := failed.Load(); n != 0 {
		t.Errorf("%d requests failed apart from the intended kills; the first: %v", n, firstFailure.Load())
	}
	if recycles == 0 {
		t.Errorf("the leaking model was never recycled")
	}
	if maxModelRSS >= hardMB<<20 {
		t.Errorf("the model's RSS reached %d MiB, over its %d MiB limit", maxModelRSS>>20, hardMB)
	}
	if grew := int64(last.RSSBytes) - int64(first.RSSBytes); grew > 32<<20 {
		t.Errorf("the server's RSS grew by %d MiB", grew>>20)
	}
	if last.OpenFDs > first.OpenFDs+8 {
		t.Errorf("the server's fds grew from %d to %d", first.OpenFDs, last.OpenFDs)
	}
	fmt.Fprintf(os.Stderr, "soak-recycle: %d served, %d intended kills, %d failed, %d recycles, model RSS peak %d MiB / %d, server RSS %d -> %d MiB, fds %d -> %d\n",
		ok.Load(), intended.Load(), failed.Load(), recycles, maxModelRSS>>20, hardMB, first.RSSBytes>>20, last.RSSBytes>>20, first.OpenFDs, last.OpenFDs)
}
