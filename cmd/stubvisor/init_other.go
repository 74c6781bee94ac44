//go:build !linux

package main

// runInit: the PID 1 init (init_linux.go) exists on Linux only.
func runInit() (code int, ok bool) { return 0, false }
