//go:build !linux

package ipc

import (
	"errors"
	"os"
	"time"
)

// Regions exist on Linux only (shmpool.Create fails elsewhere); this keeps
// the package building for documentation and vet.
type doorbell struct{ stub *os.File }

var errNoDoorbell = errors.New("ipc: doorbell: eventfd is Linux only")

func newDoorbell() (*doorbell, error)            { return nil, errNoDoorbell }
func openDoorbell(f *os.File) (*doorbell, error) { f.Close(); return nil, errNoDoorbell }
func (b *doorbell) ring()                        {}
func (b *doorbell) wait(d time.Duration)         { time.Sleep(d) }
func (b *doorbell) close() error                 { return nil }
