//go:build !linux

package cuda

import "fmt"

// Driver is unavailable off Linux.
type Driver struct{}

// Mapping is unavailable off Linux.
type Mapping struct {
	Device int
	Ptr    uint64
	Size   uint64
}

// Load always fails off Linux.
func Load() (*Driver, error) {
	return nil, fmt.Errorf("load CUDA driver: needs Linux: %w", ErrNoDriver)
}

// LoadLibrary always fails off Linux.
func LoadLibrary(string) (*Driver, error) { return Load() }

func (d *Driver) Close()           {}
func (d *Driver) DeviceCount() int { return 0 }
func (d *Driver) Path() string     { return "" }
func (m *Mapping) Close() error    { return nil }
func (d *Driver) OpenIPCHandle(int, []byte) (*Mapping, error) {
	return nil, fmt.Errorf("open CUDA IPC handle: %w", ErrNoDriver)
}
func (m *Mapping) CopyToHost(dst []byte, offset uint64) error   { return ErrNoDriver }
func (m *Mapping) CopyFromHost(offset uint64, src []byte) error { return ErrNoDriver }
func (d *Driver) Alloc(int, uint64) (*Mapping, error)           { return nil, ErrNoDriver }
func (m *Mapping) IPCHandle() ([]byte, error)                   { return nil, ErrNoDriver }
