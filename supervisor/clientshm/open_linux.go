package clientshm

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// openShmKey opens a POSIX shm object by key, confined to /dev/shm: the
// leading slashes are dropped (as glibc's shm_open does), and the rest must
// be a single name of a regular file; a symlink is refused.
func openShmKey(key string) (*os.File, uint64, error) {
	name := strings.TrimLeft(key, "/")
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return nil, 0, fmt.Errorf("key %q: %w", key, ErrBadShmKey)
	}
	fd, err := unix.Open("/dev/shm/"+name, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, 0, fmt.Errorf("open shm %q: a symbolic link: %w", name, ErrBadShmKey)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("open shm %q: %w", name, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, 0, fmt.Errorf("fstat shm %q: %w", name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, 0, fmt.Errorf("shm %q is not a regular file: %w", name, ErrBadShmKey)
	}
	return os.NewFile(uintptr(fd), "/dev/shm/"+name), uint64(st.Size), nil
}
