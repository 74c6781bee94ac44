//go:build unix

package ipctest

import (
	"testing"

	"golang.org/x/sys/unix"
)

// MapShared sizes the shared-memory object fd to size bytes and maps it
// read-write and shared, as a client maps a region it registers; the
// mapping is removed at cleanup (the caller closes fd).
func MapShared(t testing.TB, fd, size int) []byte {
	t.Helper()
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(mem) })
	return mem
}
