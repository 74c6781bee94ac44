package shmpool

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Create makes a new anonymous region: a memfd named name (the name is only
// a label in /proc/<pid>/fd, nothing appears in /dev/shm), sealed against
// shrinking, mapped at reserve bytes. The file is initially empty; call
// Grow for the parts that must be backed.
func Create(name string, reserve uint64) (_ *Region, retErr error) {
	if reserve == 0 || reserve%PageSize != 0 {
		return nil, fmt.Errorf("shmpool: create %q: reserve %d is not a positive multiple of %d", name, reserve, PageSize)
	}
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("shmpool: create %q: memfd_create: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), "memfd:"+name)
	defer func() {
		if retErr != nil {
			f.Close()
		}
	}()
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
		return nil, fmt.Errorf("shmpool: create %q: seal: %w", name, err)
	}
	return mapRegion(f, reserve)
}

// Open maps an inherited region (the stub side) at reserve bytes, the size
// the creator recorded. It takes ownership of f.
func Open(f *os.File, reserve uint64) (_ *Region, retErr error) {
	defer func() {
		if retErr != nil {
			f.Close()
		}
	}()
	if reserve == 0 || reserve%PageSize != 0 {
		return nil, fmt.Errorf("shmpool: open: reserve %d is not a positive multiple of %d", reserve, PageSize)
	}
	seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, fmt.Errorf("shmpool: open: not a sealable memfd: %w", err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return nil, fmt.Errorf("shmpool: open: region is not sealed against shrinking")
	}
	return mapRegion(f, reserve)
}

func mapRegion(f *os.File, reserve uint64) (*Region, error) {
	if reserve > uint64(^uint(0)>>1) {
		return nil, fmt.Errorf("shmpool: map %d bytes: too large for this platform", reserve)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(reserve), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("shmpool: map %s: %w", FormatBytes(reserve), err)
	}
	r := &Region{f: f, mem: mem, size: reserve}
	if _, err := r.FileSize(); err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	return r, nil
}

func fileSize(f *os.File) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, err
	}
	return uint64(st.Size), nil
}

func fallocate(f *os.File, off, n uint64) error {
	for {
		err := unix.Fallocate(int(f.Fd()), 0, int64(off), int64(n))
		if err != unix.EINTR {
			return err
		}
	}
}

func unmap(mem []byte) error { return unix.Munmap(mem) }
