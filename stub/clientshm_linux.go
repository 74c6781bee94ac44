package stub

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stubvisor/stubvisor/ipc"
)

// lifelineWait bounds how long MapRegion waits for its fd. The supervisor
// sends the fd before the ring message, so it is normally queued already.
const lifelineWait = 5 * time.Second

// openLifeline returns fd 4 when it is the supervisor's lifeline (a unix
// SOCK_SEQPACKET socket), or -1: a stub started without one (a test, an
// older supervisor) may find any descriptor of its own there. The fd is
// marked close-on-exec so that processes the model starts do not hold it.
func openLifeline() int {
	typ, err := unix.GetsockoptInt(ipc.LifelineFD, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil || typ != unix.SOCK_SEQPACKET {
		return -1
	}
	if sa, err := unix.Getsockname(ipc.LifelineFD); err != nil {
		return -1
	} else if _, ok := sa.(*unix.SockaddrUnix); !ok {
		return -1
	}
	unix.CloseOnExec(ipc.LifelineFD)
	return ipc.LifelineFD
}

// recvRegionFD takes the next fd from the lifeline and checks that its
// payload is region id. Anything else means the fds and the ring messages
// no longer pair up, which is a protocol violation.
func recvRegionFD(life int, id uint64) (int, error) {
	fds := []unix.PollFd{{Fd: int32(life), Events: unix.POLLIN}}
	deadline := time.Now().Add(lifelineWait)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return -1, fmt.Errorf("no fd on the lifeline within %s: %w", lifelineWait, ipc.ErrProtocol)
		}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return -1, fmt.Errorf("poll lifeline: %w", err)
		}
		if n > 0 {
			break
		}
	}
	var payload [16]byte
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, flags, _, err := unix.Recvmsg(life, payload[:], oob, unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("receive from the lifeline: %w", err)
	}
	var got []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range msgs {
			if fds, err := unix.ParseUnixRights(&m); err == nil {
				got = append(got, fds...)
			}
		}
	}
	if len(got) == 0 {
		return -1, fmt.Errorf("lifeline message of %d bytes carried no fd: %w", n, ipc.ErrProtocol)
	}
	for _, extra := range got[1:] {
		unix.Close(extra)
	}
	if flags&unix.MSG_CTRUNC != 0 || n != 8 || binary.LittleEndian.Uint64(payload[:8]) != id {
		unix.Close(got[0])
		return -1, fmt.Errorf("the lifeline carried another region (%d payload bytes): %w", n, ipc.ErrProtocol)
	}
	return got[0], nil
}

// mmapRegion maps size bytes at offset of fd read-write and shared. mmap
// wants a page-aligned file offset, so the mapping starts at the page
// that holds offset and data is the registered part of it.
func mmapRegion(fd int, offset, size uint64) (mem, data []byte, err error) {
	if size == 0 {
		return nil, []byte{}, nil
	}
	page := uint64(os.Getpagesize())
	base := offset - offset%page
	delta := offset - base
	length := delta + size
	if length < size || length > uint64(^uint(0)>>1) || base > uint64(1<<63-1) {
		return nil, nil, fmt.Errorf("mmap: %d bytes at %d: %w", size, offset, ErrRegionBounds)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, nil, fmt.Errorf("fstat: %w", err)
	}
	if end := offset + size; end < offset || st.Size < 0 || end > uint64(st.Size) {
		return nil, nil, fmt.Errorf("mmap: [%d, +%d) past the object's %d bytes: %w", offset, size, st.Size, ErrRegionBounds)
	}
	mem, err = unix.Mmap(fd, int64(base), int(length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap: %w", err)
	}
	return mem, mem[delta : delta+size : delta+size], nil
}

func munmapRegion(mem []byte) {
	if mem != nil {
		_ = unix.Munmap(mem)
	}
}

func closeFD(fd int) { _ = unix.Close(fd) }
