//go:build !linux

package ipc

import (
	"os"
	"time"
)

// Without futexes a waiter sleeps its whole slice; regions cannot be
// created off Linux anyway (shmpool.Create fails), so this only keeps the
// package building for documentation and vet.
func futexWaitOn(addr *uint32, val uint32, d time.Duration) { time.Sleep(d) }

func futexWakeAll(addr *uint32) {}

func getppid() int { return os.Getppid() }
