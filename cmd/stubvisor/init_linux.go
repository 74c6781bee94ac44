package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// As PID 1 of a container the process splits in two: PID 1 stays a small
// init that forwards signals to the server and reaps every process that is
// re-parented to it (a model's helper that outlives its stub), and the
// server runs as its only child. Reaping in the server's own process would
// race with the supervisor's waits on its stubs and on the commands it
// runs: a wait for any child can take a stub's exit status before the
// stub's own Wait sees it. Here the init has no child but the server, so
// every other exit it collects is an orphan's.
//
// STUBVISOR_INIT=1 starts the same init when the server is not PID 1; it
// then marks itself a child subreaper, so the orphans of the server's
// process tree come to it instead of to the real init.

// initChildEnv marks the server started by the init, which must not start
// another.
const initChildEnv = "STUBVISOR_INIT_CHILD"

// forwardedSignals are passed on to the server; SIGKILL and SIGSTOP cannot
// be caught, and the others keep their default meaning.
var forwardedSignals = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP,
	syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// runInit runs the init when this process should be one and returns the
// server's exit status for the process to exit with; ok is false when the
// process should serve itself.
func runInit() (code int, ok bool) {
	if os.Getenv(initChildEnv) != "" || (os.Getpid() != 1 && os.Getenv("STUBVISOR_INIT") != "1") {
		return 0, false
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, append([]os.Signal{syscall.SIGCHLD}, forwardedSignals...)...)
	if os.Getpid() != 1 {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			fmt.Fprintln(os.Stderr, "stubvisor: init: set child subreaper:", err)
			return 1, true
		}
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "stubvisor: init:", err)
		return 1, true
	}
	server, err := os.StartProcess(exe, os.Args, &os.ProcAttr{
		Env:   append(os.Environ(), initChildEnv+"=1"),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "stubvisor: init: start the server:", err)
		return 1, true
	}
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			_ = server.Signal(sig)
			continue
		}
		if status, done := reapAll(server.Pid); done {
			return status, true
		}
	}
	return 1, true // not reached: sigs is never closed
}

// reapAll collects every child that has exited. done is set, with the exit
// status to pass on (128+n for a signal, as a shell reports it), once the
// server is among them.
func reapAll(serverPid int) (status int, done bool) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return 0, false
		}
		if pid != serverPid {
			continue
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal()), true
		}
		return ws.ExitStatus(), true
	}
}
