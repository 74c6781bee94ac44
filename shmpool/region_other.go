//go:build !linux

package shmpool

import (
	"errors"
	"fmt"
	"os"
)

// Create needs memfd_create; it is available on Linux only.
func Create(name string, reserve uint64) (*Region, error) {
	return nil, fmt.Errorf("shmpool: create %q: %w", name, errors.ErrUnsupported)
}

// Open needs a memfd; it is available on Linux only.
func Open(f *os.File, reserve uint64) (*Region, error) {
	f.Close()
	return nil, fmt.Errorf("shmpool: open: %w", errors.ErrUnsupported)
}

func fileSize(f *os.File) (uint64, error) { return 0, errors.ErrUnsupported }

func fallocate(f *os.File, off, n uint64) error { return errors.ErrUnsupported }

func unmap(mem []byte) error { return errors.ErrUnsupported }
