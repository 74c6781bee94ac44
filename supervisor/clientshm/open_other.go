//go:build !linux

package clientshm

import (
	"errors"
	"os"
)

var errNoClientShm = errors.New("client shared memory needs Linux")

func openShmKey(key string) (*os.File, uint64, error) { return nil, 0, errNoClientShm }
