//go:build !linux

package main

// protectProcess has nothing to do where there is no PR_SET_DUMPABLE.
func protectProcess() error { return nil }
