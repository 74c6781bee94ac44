//go:build !linux

package procstat

// Read reports ErrUnsupported outside Linux.
func Read(pid int) (Stat, error) { return Stat{}, ErrUnsupported }
