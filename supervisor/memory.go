package supervisor

import (
	"fmt"
	"os/exec"
	"syscall"

	"github.com/stubvisor/stubvisor/supervisor/memlimit"
	"github.com/stubvisor/stubvisor/supervisor/stubproc"
)

// memLimiter chooses, once, how MEMORY_LIMIT_MB is enforced on this host
// and logs the choice.
func (s *Supervisor) memLimiter() (*memlimit.Limiter, error) {
	s.memOnce.Do(func() {
		s.mem, s.memErr = memlimit.New(memlimit.Method(s.opts.MemoryLimitMethod))
		if s.memErr == nil {
			s.log.Info("memory limits", "method", s.mem.Method(), "why", s.mem.Reason())
		}
	})
	return s.mem, s.memErr
}

// memConfinement is one stub's memory limit as stubproc confines it.
type memConfinement struct{ lim *memlimit.Limit }

func (c memConfinement) Started(pid int) error { return c.lim.Started(pid) }

func (c memConfinement) ExitCause(ws syscall.WaitStatus) string {
	if c.lim.OverLimit(ws) {
		return fmt.Sprintf("over memory limit: %s %d (%s)", ParamMemoryLimitMB, c.lim.Bytes()>>20, c.lim.Method())
	}
	return ""
}

func (c memConfinement) Close() { c.lim.Close() }

// confine puts the instance's next stub under the model's memory limit
// (stubproc.Config.Confine); nil when the model has none.
func (inst *instance) confine(cmd *exec.Cmd) (stubproc.Confinement, error) {
	l, err := inst.mv.sup.memLimiter()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ParamMemoryLimitMB, err)
	}
	lim, err := l.Prepare(inst.name, inst.mv.limits.memory)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ParamMemoryLimitMB, err)
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	lim.SysProcAttr(cmd.SysProcAttr)
	cmd.Env = append(cmd.Env, lim.Env()...)
	return memConfinement{lim}, nil
}

// memoryLimitText is the limit as /v2/stubs shows it ("" for none).
func (inst *instance) memoryLimitText() string {
	if inst.mv.limits.memory == 0 {
		return ""
	}
	l, err := inst.mv.sup.memLimiter()
	if err != nil {
		return "unenforced: " + err.Error()
	}
	return fmt.Sprintf("%d MiB (%s)", inst.mv.limits.memory>>20, l.Method())
}
