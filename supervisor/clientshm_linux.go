package supervisor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// lifeline returns the two ends of a stub's lifeline: a unix socketpair
// whose child end the stub inherits as fd 4. It carries client region fds
// (SCM_RIGHTS) ahead of the ring messages that name them.
func lifeline() (parent, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("lifeline: socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "stubvisor-lifeline"), os.NewFile(uintptr(fds[1]), "stubvisor-lifeline-stub"), nil
}

// sendFD sends fd with SCM_RIGHTS; the payload is the region id, so the
// stub can check it pairs the fd with the MapRegion that follows.
func sendFD(life, fd *os.File, id uint64) error {
	var payload [8]byte
	binary.LittleEndian.PutUint64(payload[:], id)
	rights := unix.UnixRights(int(fd.Fd()))
	if err := unix.Sendmsg(int(life.Fd()), payload[:], rights, nil, unix.MSG_NOSIGNAL|unix.MSG_DONTWAIT); err != nil {
		return fmt.Errorf("send region fd: %w", err)
	}
	return nil
}

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
