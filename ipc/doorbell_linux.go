package ipc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// doorbell is the eventfd on which the supervisor's reader of ring 1
// sleeps, instead of a futex. A futex wait blocks the goroutine's OS
// thread inside a system call; the Go runtime answers with a P hand-off,
// another thread and a sysmon that keeps polling every 20 µs, which on a
// busy server cost more than the whole ring. A read of a non-blocking
// eventfd parks only the goroutine in the netpoller. The stub rings it (a
// write of 1) where it would FUTEX_WAKE, after the same Dekker handshake
// on reader_sleeping.
type doorbell struct {
	f  *os.File // pollable: reads park in the netpoller, with deadlines
	rc syscall.RawConn
	fd int
	// stub is a second descriptor of the same eventfd for a stub's extra
	// files. It was opened while the eventfd was still blocking, so
	// os/exec's File.Fd leaves it alone; on a pollable File that call
	// would clear O_NONBLOCK, a flag every descriptor of it shares.
	stub *os.File
}

func newDoorbell() (_ *doorbell, err error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("ipc: doorbell: eventfd: %w", err)
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err == nil {
		err = unix.SetNonblock(fd, true)
		if err != nil {
			unix.Close(dup)
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("ipc: doorbell: %w", err)
	}
	b := &doorbell{stub: os.NewFile(uintptr(dup), "stubvisor-doorbell-stub")}
	b.f, b.fd = os.NewFile(uintptr(fd), "stubvisor-doorbell"), fd
	if b.rc, err = b.f.SyscallConn(); err != nil {
		b.close()
		return nil, fmt.Errorf("ipc: doorbell: %w", err)
	}
	return b, nil
}

// openDoorbell wraps the descriptor a stub inherited; a stub only rings it.
func openDoorbell(f *os.File) (*doorbell, error) {
	// Not f.Fd(), for the reason above.
	fd := -1
	rc, err := f.SyscallConn()
	if err == nil {
		err = rc.Control(func(d uintptr) { fd = int(d) })
	}
	var st unix.Stat_t
	if err == nil {
		err = unix.Fstat(fd, &st)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("doorbell: %w: %w", ErrBadRegion, err)
	}
	return &doorbell{f: f, fd: fd}, nil
}

var bellOne = binary.LittleEndian.AppendUint64(nil, 1)

// ring wakes the sleeper. EAGAIN (the counter is at its maximum) means it
// is already rung.
func (b *doorbell) ring() { unix.Write(b.fd, bellOne) }

// wait sleeps until the bell rings or d passes, and clears it. It parks
// before it reads: the last wait left the counter at zero, so a first
// read would only fail with EAGAIN, a system call for nothing. The
// netpoller remembers an edge that came while nobody waited, so a ring
// between two waits is not lost.
func (b *doorbell) wait(d time.Duration) {
	var buf [8]byte
	b.f.SetReadDeadline(time.Now().Add(d))
	parked := false
	b.rc.Read(func(fd uintptr) bool {
		if !parked {
			parked = true
			return false
		}
		unix.Read(int(fd), buf[:])
		return true
	})
}

func (b *doorbell) close() error {
	err := b.f.Close()
	if b.stub != nil {
		err = errors.Join(err, b.stub.Close())
	}
	return err
}
