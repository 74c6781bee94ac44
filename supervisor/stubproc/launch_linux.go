package stubproc

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
)

// Launcher starts every stub process from one goroutine locked to its OS
// thread for the life of the supervisor.
//
// NOTE: Linux delivers Pdeathsig when the *thread* that forked the child
// exits, not the process. A Go goroutine may run on any thread and the
// runtime may retire a thread whose locked goroutine returns, so stubs are
// forked from a thread that never goes away. With Pdeathsig=SIGKILL a stub
// dies with the supervisor however the supervisor dies (SIGKILL included);
// the stub's own getppid check is the second line of defence.
type Launcher struct {
	reqs chan launchReq
}

type launchReq struct {
	cmd  *exec.Cmd
	errc chan error
}

func NewLauncher() *Launcher {
	l := &Launcher{reqs: make(chan launchReq)}
	go func() {
		runtime.LockOSThread() // never unlocked: this thread lives as long as the process
		stubPolicy()           // stubs inherit it (see SetCPUPolicy)
		for r := range l.reqs {
			r.errc <- r.cmd.Start()
		}
	}()
	return l
}

// start starts cmd in its own process group (so a terminal's Ctrl-C reaches
// only the supervisor, which then stops stubs in order) with Pdeathsig,
// keeping the cgroup a Confinement chose for it.
func (l *Launcher) start(cmd *exec.Cmd) error {
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if c := cmd.SysProcAttr; c != nil {
		attr.UseCgroupFD, attr.CgroupFD = c.UseCgroupFD, c.CgroupFD
	}
	cmd.SysProcAttr = attr
	errc := make(chan error, 1)
	l.reqs <- launchReq{cmd: cmd, errc: errc}
	return <-errc
}

// Stop ends the launcher thread; call it only when no stub is alive.
func (l *Launcher) Stop() { close(l.reqs) }

// kill sends SIGKILL to a stub. It is safe to call on a process that has
// already exited.
func kill(p *os.Process) {
	if p != nil {
		_ = p.Signal(syscall.SIGKILL)
	}
}

// killGroup sends SIGKILL to a stub's process group: whatever the model
// started (helpers, worker pools) ends with its stub. A helper that left
// the group (setsid) is out of reach.
func killGroup(pid int) {
	if pid > 0 {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
}
