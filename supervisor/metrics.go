package supervisor

import (
	"context"
	"sync"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc"
	"github.com/stubvisor/stubvisor/supervisor/custommetrics"
	"github.com/stubvisor/stubvisor/supervisor/stubproc"
)

// CustomMetrics implements backendapi.Backend: it asks every live stub,
// in parallel, for the metric families its model defined and merges the
// series that share a family and label set. As in Triton, where all
// instances of a model update one registry in the server, the instances'
// values add up (gauges included). A model's metrics update without any
// message; they cross the ring only here, when someone scrapes.
func (s *Supervisor) CustomMetrics(ctx context.Context) ([]backendapi.MetricFamily, error) {
	var procs []*stubproc.Proc
	s.mu.RLock()
	for _, e := range s.models {
		for _, mv := range e.versions {
			for _, inst := range mv.instances {
				if p := inst.liveProc(); p != nil {
					procs = append(procs, p)
				}
			}
		}
	}
	s.mu.RUnlock()
	// A stub answers within its heartbeat period even in a long execute; a
	// stuck one must not hold the scrape for long.
	timeout := collectTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	if timeout <= 0 {
		return nil, ctx.Err()
	}
	var (
		mu  sync.Mutex
		all = custommetrics.NewMerger()
		wg  sync.WaitGroup
	)
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := p.Call(func(id uint64) ipc.Message { return &ipc.CollectMetricsMsg{ID: id} }, timeout)
			if err == nil && res.Error != nil {
				err = stubproc.ResultError(res.Error)
			}
			var fams []backendapi.MetricFamily
			if err == nil {
				fams, err = custommetrics.Parse(res.Value)
			}
			if err != nil {
				p.Log().Debug("custom metrics not collected", "error", err)
				return
			}
			mu.Lock()
			all.Add(fams)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return all.Families(), nil
}

// collectTimeout bounds one stub's answer to CollectMetrics.
const collectTimeout = time.Second
