//go:build !linux

package stub

import (
	"errors"
	"fmt"
)

// errNoClientShm: client shared memory needs Linux (SCM_RIGHTS and mmap of
// a POSIX shm object).
var errNoClientShm = errors.New("client shared memory is supported on Linux only")

func openLifeline() int { return -1 }

func recvRegionFD(int, uint64) (int, error) { return -1, errNoClientShm }

func mmapRegion(int, uint64, uint64) ([]byte, []byte, error) {
	return nil, nil, fmt.Errorf("mmap: %w", errNoClientShm)
}

func munmapRegion([]byte) {}

func closeFD(int) {}
