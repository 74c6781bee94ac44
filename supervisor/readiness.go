package supervisor

import (
	"fmt"
	"sync"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc"
	"github.com/stubvisor/stubvisor/supervisor/stubproc"
)

// readyCheckTimeout bounds how long a readiness request waits for a
// model's is_ready() (Triton's kUserModelReadinessTimeoutMs).
const readyCheckTimeout = 5 * time.Second

// userReadiness runs a model's own readiness check (is_ready() in Python,
// stub.ReadyChecker in Go) for one instance, as Triton does: one
// check at a time per instance; callers that come while one runs wait for
// its answer instead of asking again, each for at most readyCheckTimeout.
// A check that outlives its callers still records its answer for the next.
type userReadiness struct {
	mu       sync.Mutex
	inflight chan struct{} // closed when the running check answers
	ready    bool
	err      error
}

// hasReadyFn reads the Initialize answer: {"is_ready": true} when the
// model defines its own readiness check.
func hasReadyFn(v any) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	b, _ := m["is_ready"].(bool)
	return b
}

// check asks p's model whether it is ready.
func (u *userReadiness) check(p *stubproc.Proc) (bool, error) {
	u.mu.Lock()
	done := u.inflight
	joined := done != nil
	if !joined {
		done = make(chan struct{})
		u.inflight = done
		go u.run(p, done)
	}
	u.mu.Unlock()
	select {
	case <-done:
	case <-time.After(readyCheckTimeout):
		if joined {
			return false, backendapi.Errorf(backendapi.Unavailable, "Timed out waiting for in-flight is_ready() response")
		}
		return false, backendapi.Errorf(backendapi.Unavailable, "Timed out waiting for user-defined is_ready() response")
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.ready, u.err
}

// run sends IsReady and records the answer; it waits as long as the stub
// lives (the call ends with the stub).
func (u *userReadiness) run(p *stubproc.Proc, done chan struct{}) {
	ready, err := false, error(nil)
	res, err := p.Call(func(id uint64) ipc.Message { return &ipc.IsReadyMsg{ID: id} }, 0)
	if err == nil {
		if res.Error != nil {
			err = stubproc.ResultError(res.Error)
		} else if b, ok := res.Value.(bool); ok {
			ready = b
		} else {
			err = fmt.Errorf("is_ready() answered %T, not a bool", res.Value)
		}
	}
	u.mu.Lock()
	u.ready, u.err, u.inflight = ready, err, nil
	u.mu.Unlock()
	close(done)
}

// userReady runs the model's own readiness check on every live instance
// whose model defines one; the version is ready when all of them say so.
func (mv *modelVersion) userReady() error {
	for _, inst := range mv.instances {
		p := inst.liveProc()
		if p == nil || !p.ReadyFn() {
			continue
		}
		ok, err := inst.readiness.check(p)
		if err != nil {
			return backendapi.Errorf(backendapi.Unavailable, "Model '%s' version %d is not ready: is_ready() of instance '%s' failed: %s", mv.name, mv.version, inst.name, backendapi.MessageOf(err))
		}
		if !ok {
			return backendapi.Errorf(backendapi.Unavailable, "Model '%s' version %d is not ready: is_ready() of instance '%s' returned False", mv.name, mv.version, inst.name)
		}
	}
	return nil
}
