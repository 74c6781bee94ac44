//go:build !linux

package fakesup

import "syscall"

// sysProcAttr: without Pdeathsig the test's cleanups alone end the stub.
func sysProcAttr() *syscall.SysProcAttr { return nil }
