package stubproc

import (
	"encoding/binary"
	"fmt"
	"os"

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
