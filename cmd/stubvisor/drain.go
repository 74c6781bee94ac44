package main

import (
	"os"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stubvisor/stubvisor/supervisor"
)

// drainBackend is the backend the front ends see: the supervisor, except
// that the server reports itself not ready from the moment a shutdown
// begins, while the supervisor still serves (see drain).
type drainBackend struct {
	*supervisor.Supervisor
	draining atomic.Bool
}

// Ready implements backendapi.Backend.
func (d *drainBackend) Ready() bool { return !d.draining.Load() && d.Supervisor.Ready() }

// drain starts a shutdown: readiness turns false at once, and the
// listeners go on accepting and serving for delay (but not past deadline),
// since a Kubernetes Service keeps routing new connections to a
// terminating pod until every node has seen that it is not ready. Another
// signal ends the delay early.
func (d *drainBackend) drain(delay time.Duration, deadline time.Time, sigs <-chan os.Signal, log hclog.Logger) {
	d.draining.Store(true)
	if left := time.Until(deadline); delay > left {
		delay = left
	}
	if delay <= 0 {
		return
	}
	log.Info("not ready; serving on while traffic moves away", "drain-delay", delay.String())
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
	case sig := <-sigs:
		log.Info("drain cut short", "signal", sig.String())
	}
}
