//go:build !linux

package procstat

import "time"

// Read reports ErrUnsupported outside Linux.
func Read(pid int) (Stat, error) { return Stat{}, ErrUnsupported }

// RSS reports ErrUnsupported outside Linux.
func RSS(pid int) (uint64, error) { return 0, ErrUnsupported }

// CPU reports ErrUnsupported outside Linux.
func CPU(pid int) (time.Duration, error) { return 0, ErrUnsupported }

// IdleTime reports ErrUnsupported outside Linux.
func IdleTime() (time.Duration, error) { return 0, ErrUnsupported }
