package fakesup

import "syscall"

// sysProcAttr makes the stub die with the test binary, as the supervisor's
// stubs die with it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
