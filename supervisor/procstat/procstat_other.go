//go:build !linux

package procstat

// Read reports ErrUnsupported outside Linux.
func Read(pid int) (Stat, error) { return Stat{}, ErrUnsupported }

// RSS reports ErrUnsupported outside Linux.
func RSS(pid int) (uint64, error) { return 0, ErrUnsupported }
