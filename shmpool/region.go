package shmpool

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"
)

// ErrOutOfBounds is returned when an offset or length lies outside the
// region, outside an arena's reservation, or past what its owner has
// committed.
var ErrOutOfBounds = errors.New("out of bounds")

// ErrClosed is returned by a Region or Arena used after Close.
var ErrClosed = errors.New("region closed")

// PageSize is the alignment of region growth and of the areas the ipc
// layout places in a region.
const PageSize = 4096

// Region is one memfd mapped MAP_SHARED at its full reserved size. The file
// behind it starts small and grows with Grow; bytes past the file's end are
// reserved address space only and must not be touched (Slice refuses them).
type Region struct {
	f    *os.File
	mem  []byte
	size uint64 // reserved bytes (the mapping length)

	// fileSize is a lower bound of the file's size: it only grows (the
	// file is sealed against shrinking), so a range below it is always
	// backed. Slice refreshes it with fstat when a range reaches past it,
	// which is how growth by the peer becomes visible.
	fileSize atomic.Uint64

	closeOnce sync.Once
	closeErr  error
}

// File returns the memfd. The caller may pass it to a child (for example
// as exec.Cmd.ExtraFiles[0]); it stays owned by the Region.
func (r *Region) File() *os.File { return r.f }

// Size returns the reserved size: the mapping length.
func (r *Region) Size() uint64 { return r.size }

// Bytes returns the whole mapping. Only the first FileSize bytes are backed.
func (r *Region) Bytes() []byte { return r.mem }

// FileSize returns the current size of the file behind the region.
func (r *Region) FileSize() (uint64, error) {
	n, err := fileSize(r.f)
	if err != nil {
		return 0, fmt.Errorf("shmpool: stat region: %w", err)
	}
	r.noteFileSize(n)
	return n, nil
}

func (r *Region) noteFileSize(n uint64) {
	for {
		cur := r.fileSize.Load()
		if n <= cur || r.fileSize.CompareAndSwap(cur, n) {
			return
		}
	}
}

// Slice returns mem[off:off+n] after checking that the range lies inside
// the mapping and inside the file (refreshing the known file size once when
// it does not).
func (r *Region) Slice(off, n uint64) ([]byte, error) {
	end := off + n
	if end < off || end > r.size {
		return nil, fmt.Errorf("shmpool: range [%d, +%d) past the region's %d bytes: %w", off, n, r.size, ErrOutOfBounds)
	}
	if end > r.fileSize.Load() {
		fs, err := r.FileSize()
		if err != nil {
			return nil, err
		}
		if end > fs {
			return nil, fmt.Errorf("shmpool: range [%d, +%d) past the file's %d bytes: %w", off, n, fs, ErrOutOfBounds)
		}
	}
	return r.mem[off:end:end], nil
}

// Grow makes sure the file backs [off, off+n). It uses fallocate, which
// allocates the pages now (so running out of memory is an error here, not
// a SIGBUS later) and never shrinks the file.
func (r *Region) Grow(off, n uint64) error {
	end := off + n
	if end < off || end > r.size {
		return fmt.Errorf("shmpool: grow [%d, +%d) past the region's %d bytes: %w", off, n, r.size, ErrOutOfBounds)
	}
	if n == 0 {
		return nil
	}
	if err := fallocate(r.f, off, n); err != nil {
		return fmt.Errorf("shmpool: grow region to %s: %w", FormatBytes(end), err)
	}
	r.noteFileSize(end)
	return nil
}

// Uint32 returns a pointer to the 4-byte word at off, for use with
// sync/atomic. off must be 4-byte aligned and inside the backed part.
func (r *Region) Uint32(off uint64) *uint32 {
	if off%4 != 0 || off+4 > r.size {
		panic(fmt.Sprintf("shmpool: misaligned or out-of-range word at %d", off))
	}
	return (*uint32)(unsafe.Pointer(&r.mem[off]))
}

// Uint64 returns a pointer to the 8-byte word at off, for use with
// sync/atomic. off must be 8-byte aligned and inside the backed part.
func (r *Region) Uint64(off uint64) *uint64 {
	if off%8 != 0 || off+8 > r.size {
		panic(fmt.Sprintf("shmpool: misaligned or out-of-range word at %d", off))
	}
	return (*uint64)(unsafe.Pointer(&r.mem[off]))
}

// Close unmaps the region and closes the file. Slices obtained from the
// region must not be used afterwards. Close is idempotent.
func (r *Region) Close() error {
	r.closeOnce.Do(func() {
		var errs []error
		if r.mem != nil {
			if err := unmap(r.mem); err != nil {
				errs = append(errs, fmt.Errorf("shmpool: unmap region: %w", err))
			}
			r.mem = nil
		}
		if err := r.f.Close(); err != nil {
			errs = append(errs, fmt.Errorf("shmpool: close region: %w", err))
		}
		r.closeErr = errors.Join(errs...)
	})
	return r.closeErr
}

// FormatBytes renders a byte count the way error messages and the status
// page show it: whole GiB, MiB or KiB when exact, else bytes.
func FormatBytes(n uint64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}
