package fakesup

import (
	"encoding/binary"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// lifeline makes the socket pair of the lifeline and returns the stub's
// end, which the caller closes once the stub has it.
func (s *Stub) lifeline(t testing.TB) *os.File {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	s.life = fds[0]
	t.Cleanup(func() { unix.Close(fds[0]) })
	return os.NewFile(uintptr(fds[1]), "lifeline-stub")
}

// SendFD sends fd on the lifeline with payload id, as the supervisor does
// before a MapRegion.
func (s *Stub) SendFD(fd int, id uint64) {
	s.T.Helper()
	if s.life < 0 {
		s.T.Fatal("SendFD: the stub was started without a lifeline")
	}
	payload := binary.LittleEndian.AppendUint64(nil, id)
	if err := unix.Sendmsg(s.life, payload, unix.UnixRights(fd), nil, 0); err != nil {
		s.T.Fatal(err)
	}
}
