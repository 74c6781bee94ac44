package main

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestProtectProcess(t *testing.T) {
	if err := protectProcess(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0) })
	if d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0); err != nil || d != 0 {
		t.Fatalf("dumpable %d %v, want 0", d, err)
	}
}
