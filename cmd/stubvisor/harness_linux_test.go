package main

import (
	"os/exec"
	"runtime"
	"syscall"
)

// startTied starts a server that the kernel kills when the test binary
// ends (Pdeathsig): a run stopped by -timeout or a signal skips every
// t.Cleanup, and its servers, with their stubs, would live on. The signal
// follows the thread that forked, not the process, so every server is
// forked from one locked thread that never exits.
func startTied(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	done := make(chan error, 1)
	spawns <- spawn{cmd, done}
	return <-done
}

type spawn struct {
	cmd  *exec.Cmd
	done chan error
}

var spawns = func() chan spawn {
	c := make(chan spawn)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread lives as long as the test binary
		for s := range c {
			s.done <- s.cmd.Start()
		}
	}()
	return c
}()
