//go:build !linux

package supervisor

import (
	"errors"
	"os"
)

var errNoClientShm = errors.New("client shared memory needs Linux")

func lifeline() (parent, child *os.File, err error) { return nil, nil, nil }

func sendFD(life, fd *os.File, id uint64) error { return errNoClientShm }

func openShmKey(key string) (*os.File, uint64, error) { return nil, 0, errNoClientShm }
