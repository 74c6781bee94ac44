package supervisor

import (
	"sync"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/supervisor/procstat"
)

// The status page plots the last five minutes, one sample a second. The
// samples live here rather than in the page so that a reload, or a page
// opened after a leak began, still shows the minutes before it.
const (
	sampleInterval = time.Second
	historyLen     = 300
)

// ring is a bounded history, oldest sample overwritten first.
type ring struct {
	buf  []backendapi.Sample
	next int
	full bool
}

func (r *ring) add(s backendapi.Sample) {
	if r.buf == nil {
		r.buf = make([]backendapi.Sample, historyLen)
	}
	r.buf[r.next] = s
	r.next = (r.next + 1) % len(r.buf)
	r.full = r.full || r.next == 0
}

// samples returns a copy of the history, oldest first.
func (r *ring) samples() []backendapi.Sample {
	if !r.full {
		return append([]backendapi.Sample(nil), r.buf[:r.next]...)
	}
	out := make([]backendapi.Sample, 0, len(r.buf))
	out = append(out, r.buf[r.next:]...)
	return append(out, r.buf[:r.next]...)
}

// versionHistory is one model version's ring and the request totals of the
// sample before, from which the next sample's latency is the difference.
type versionHistory struct {
	ring      ring
	count     uint64
	total     time.Duration
	hasTotals bool
}

// histories holds the history of every loaded model version.
type histories struct {
	mu sync.Mutex
	m  map[*modelVersion]*versionHistory
}

// of returns mv's history, or nil.
func (h *histories) of(mv *modelVersion) []backendapi.Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	if vh := h.m[mv]; vh != nil {
		return vh.ring.samples()
	}
	return nil
}

// sampleLoop takes a sample of every loaded version each second until the
// supervisor closes.
func (s *Supervisor) sampleLoop() {
	defer s.sampleWG.Done()
	t := time.NewTicker(sampleInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stopc:
			return
		case now := <-t.C:
			s.sample(now)
		}
	}
}

// sample records one sample of every loaded version and forgets the
// versions that are gone.
func (s *Supervisor) sample(now time.Time) {
	s.mu.RLock()
	var mvs []*modelVersion
	for _, e := range s.models {
		mvs = append(mvs, e.versions...)
	}
	s.mu.RUnlock()

	h := &s.hist
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := make(map[*modelVersion]*versionHistory, len(mvs))
	for _, mv := range mvs {
		vh := h.m[mv]
		if vh == nil {
			vh = &versionHistory{}
		}
		seen[mv] = vh
		sm := backendapi.Sample{UnixMS: now.UnixMilli(), RSS: map[string]uint64{}}
		count, total := mv.stats.successTotals()
		if vh.hasTotals && count > vh.count {
			sm.Requests = count - vh.count
			sm.LatencyUS = float64(total-vh.total) / float64(time.Microsecond) / float64(sm.Requests)
		}
		vh.count, vh.total, vh.hasTotals = count, total, true
		for _, inst := range mv.instances {
			if p := inst.liveProc(); p != nil {
				if rss, err := procstat.RSS(p.PID()); err == nil {
					sm.RSS[inst.name] = rss
					inst.checkRecycle(p, rss)
				}
			}
		}
		vh.ring.add(sm)
	}
	h.m = seen
}

// withProcStat fills in the figures /proc has of st's stub process.
func withProcStat(st *backendapi.StubStatus) {
	if st.PID <= 0 {
		return
	}
	if ps, err := procstat.Read(st.PID); err == nil {
		st.RSSBytes, st.CPUSeconds, st.OpenFDs, st.Threads = ps.RSSBytes, ps.CPUSeconds, ps.OpenFDs, ps.Threads
	}
}
