// Package fakesup is the supervisor's side of one stub, played by a test:
// it creates the region, starts a real stub process (the Go stub, by
// re-executing the test binary, or the Python stub) with the region and
// the lifeline on the descriptors the supervisor uses, checks the
// handshake, and speaks the protocol of package ipc to the stub with every
// wait bounded. The process, the region and the lifeline are released by
// t.Cleanup, and Start checks (shmtest.NoLeaks) that the test leaves no
// goroutine, fd, child or /dev/shm entry behind. It is imported only by
// tests, and lives apart from ipctest because it imports ipc, whose own
// tests import ipctest.
package fakesup

import (
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
	"github.com/stubvisor/stubvisor/shmpool/shmtest"
)

// WaitBound bounds every wait on the stub.
const WaitBound = 10 * time.Second

// Options say how Start builds the region and what the stub gets.
type Options struct {
	// Name names the region's memfd.
	Name string
	// Settings size the region; the zero value means ipc.DefaultSettings.
	Settings ipc.Settings
	// Lifeline hands the stub a lifeline socket on ipc.LifelineFD, as the
	// supervisor does; the test's end is Stub.SendFD.
	Lifeline bool
}

// Stub is a running stub process on its own region, with the test as its
// supervisor. T receives the failures; a subtest that drives a stub
// started by its parent sets it to its own t for its duration.
type Stub struct {
	T      testing.TB
	Conn   *ipc.Conn
	Cmd    *exec.Cmd
	Stderr *ipctest.LockedBuffer // the stub's stdout and stderr
	Hello  *ipc.HelloMsg
	Logs   []*ipc.LogMsg // Log messages Recv passed over

	life   int // the test's end of the lifeline, or -1
	exited chan struct{}
	err    error // the stub's exit, valid once exited is closed
	nextID uint64
}

// Self returns a command that runs this test binary again, running no
// test, with env added: a TestMain that finds its role variable there
// serves a Go model instead of running the tests.
func Self(env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// PythonStub returns the command that runs the Python stub (module) from
// the package directory dir under ipctest.PythonPath, for instance;
// it skips the test where that interpreter lacks numpy or msgpack.
func PythonStub(t testing.TB, dir, module, instance string) *exec.Cmd {
	t.Helper()
	ipctest.RequirePython(t)
	cmd := exec.Command(ipctest.PythonPath, "-m", module)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, ipc.InstanceEnv+"="+instance)
	return cmd
}

// Start creates a region, starts cmd as its stub and reads the stub's
// Hello, failing the test unless it names this protocol version and the
// process's pid (in the message and in the control block).
func Start(t testing.TB, cmd *exec.Cmd, o Options) *Stub {
	t.Helper()
	shmtest.NoLeaks(t)
	if o.Settings == (ipc.Settings{}) {
		o.Settings = ipc.DefaultSettings()
	}
	conn, err := ipc.Create(o.Name, o.Settings)
	if err != nil {
		t.Fatal(err)
	}
	s := &Stub{T: t, Conn: conn, Cmd: cmd, Stderr: &ipctest.LockedBuffer{}, life: -1, exited: make(chan struct{})}
	t.Cleanup(func() {
		if err := conn.Close(); err != nil {
			t.Errorf("close region: %v", err)
		}
	})
	cmd.ExtraFiles = []*os.File{ipc.RegionFD - 3: conn.File()}
	if o.Lifeline {
		child := s.lifeline(t)
		defer child.Close()
		cmd.ExtraFiles = append(cmd.ExtraFiles, child)
	}
	cmd.Stdout, cmd.Stderr = s.Stderr, s.Stderr
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s.err = cmd.Wait()
		conn.MarkDead() // what the supervisor's reaper does
		close(s.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-s.exited:
		case <-time.After(WaitBound):
			t.Errorf("stub %d did not exit within %v of SIGKILL", cmd.Process.Pid, WaitBound)
		}
	})
	s.Hello = s.Expect(ipc.KindHello).(*ipc.HelloMsg)
	if s.Hello.Version != ipc.ProtocolVersion || int(s.Hello.PID) != cmd.Process.Pid {
		t.Fatalf("hello = %+v, want version %d pid %d", s.Hello, ipc.ProtocolVersion, cmd.Process.Pid)
	}
	if got := conn.StubPID(); got != cmd.Process.Pid {
		t.Fatalf("stub pid in control block = %d, want %d", got, cmd.Process.Pid)
	}
	return s
}

// ID returns a fresh message id.
func (s *Stub) ID() uint64 { s.nextID++; return s.nextID }

// Send sends m to the stub.
func (s *Stub) Send(m ipc.Message) {
	s.T.Helper()
	if err := s.Conn.Send(m); err != nil {
		s.T.Fatalf("send %T: %v", m, err)
	}
}

// Recv returns the next message that is not a Log (those are kept in
// Logs), failing the test when none comes within WaitBound.
func (s *Stub) Recv() ipc.Message {
	s.T.Helper()
	deadline := time.Now().Add(WaitBound)
	for {
		m, err := s.Conn.Recv(deadline)
		if err != nil {
			s.T.Fatalf("recv: %v\nstub output:\n%s", err, s.Stderr)
		}
		if l, ok := m.(*ipc.LogMsg); ok {
			s.Logs = append(s.Logs, l)
			continue
		}
		return m
	}
}

// Expect returns the next message that is not a Log, failing the test
// unless it is of kind.
func (s *Stub) Expect(kind ipc.Kind) ipc.Message {
	s.T.Helper()
	m := s.Recv()
	if m.Kind() != kind {
		s.T.Fatalf("waiting for kind %d, got %T %+v", kind, m, m)
	}
	return m
}

// Call sends the request build makes with a fresh id and returns its
// Result.
func (s *Stub) Call(build func(id uint64) ipc.Message) *ipc.ResultMsg {
	s.T.Helper()
	id := s.ID()
	s.Send(build(id))
	r, ok := s.Recv().(*ipc.ResultMsg)
	if !ok || r.ID != id {
		s.T.Fatalf("reply to %d = %+v", id, r)
	}
	return r
}

// Stream collects the answer to a decoupled batch of one request: its
// Responses up to and including the final one, in order, and the batch's
// ExecuteDone, which must carry no error and no responses, in whichever
// order the two come. Anything else fails the test.
func (s *Stub) Stream() []ipc.Response {
	s.T.Helper()
	var rs []ipc.Response
	final := func() bool { return len(rs) > 0 && rs[len(rs)-1].Flags&ipc.FlagFinal != 0 }
	done := false
	for !done || !final() {
		switch m := s.Recv().(type) {
		case *ipc.ExecuteDoneMsg:
			if done || m.Error != nil || len(m.Responses) != 0 {
				s.T.Fatalf("decoupled ExecuteDone = %+v", m)
			}
			done = true
		case *ipc.ResponseMsg:
			if final() {
				s.T.Fatalf("response %+v after the final one", m.Response)
			}
			rs = append(rs, m.Response)
		default:
			s.T.Fatalf("unexpected %T %+v", m, m)
		}
	}
	return rs
}

// IsReady asks the stub whether its model is ready. The round trip also
// orders what the test reads next after every message sent before.
func (s *Stub) IsReady() any {
	s.T.Helper()
	return s.Call(func(id uint64) ipc.Message { return &ipc.IsReadyMsg{ID: id} }).Value
}

// Tensor places data in arena 0 and describes it (an empty tensor has no
// location).
func (s *Stub) Tensor(name string, dt backendapi.DataType, shape []int64, data []byte) ipc.Tensor {
	s.T.Helper()
	if len(data) == 0 {
		return ipc.Tensor{Name: name, DataType: uint8(dt), Shape: shape, Loc: ipc.LocNone}
	}
	off, b, err := s.Conn.Alloc(uint64(len(data)))
	if err != nil {
		s.T.Fatal(err)
	}
	copy(b, data)
	return ipc.Tensor{Name: name, DataType: uint8(dt), Shape: shape, Loc: ipc.LocArena0, Offset: off, Size: uint64(len(data))}
}

// Read returns the bytes of a tensor the stub sent, inline or in an arena.
func (s *Stub) Read(t ipc.Tensor) []byte {
	s.T.Helper()
	if t.Loc == ipc.LocInline {
		return t.Data
	}
	b, err := s.Conn.View(t.Loc, t.Offset, t.Size)
	if err != nil {
		s.T.Fatalf("view %s: %v", t.Name, err)
	}
	return b
}

// Free hands the test's arena-0 blocks of tensors back.
func (s *Stub) Free(ts ...ipc.Tensor) {
	s.T.Helper()
	for _, t := range ts {
		if t.Loc != ipc.LocArena0 {
			continue
		}
		if err := s.Conn.Free(t.Offset); err != nil {
			s.T.Fatal(err)
		}
	}
}

// Release hands every arena-1 output of rs back to the stub, as the
// supervisor does; nothing is sent when there is none.
func (s *Stub) Release(rs ...ipc.Response) {
	s.T.Helper()
	var offs []uint64
	for _, r := range rs {
		for _, t := range r.Outputs {
			if t.Loc == ipc.LocArena1 && t.Size > 0 {
				offs = append(offs, t.Offset)
			}
		}
	}
	if len(offs) > 0 {
		s.Send(&ipc.ReleaseMsg{Offsets: offs})
	}
}

// StubInUse waits (bounded) until the stub's arena holds want bytes,
// failing the test when it does not. The stub publishes its usage in the
// control block as it handles Releases; each look follows a round trip,
// so it sees every message sent before handled.
func (s *Stub) StubInUse(want uint64) {
	s.T.Helper()
	deadline := time.Now().Add(WaitBound)
	for {
		s.IsReady()
		_, peer := s.Conn.Usage()
		if peer.InUse == want {
			return
		}
		if time.Now().After(deadline) {
			s.T.Fatalf("stub arena in use = %d bytes, want %d", peer.InUse, want)
		}
	}
}

// Finalize asks the stub to finalize and fails the test unless it answers
// and exits 0.
func (s *Stub) Finalize() {
	s.T.Helper()
	if r := s.Call(func(id uint64) ipc.Message { return &ipc.FinalizeMsg{ID: id} }); r.Error != nil {
		s.T.Fatalf("finalize: %+v", r.Error)
	}
	if err := s.WaitExit(); err != nil {
		s.T.Fatalf("stub exited with %v after Finalize\n%s", err, s.Stderr)
	}
}

// WaitExit waits (bounded) for the stub to exit and returns how it did.
func (s *Stub) WaitExit() error {
	s.T.Helper()
	select {
	case <-s.exited:
		return s.err
	case <-time.After(WaitBound):
		s.T.Fatalf("stub did not exit within %s", WaitBound)
		return nil
	}
}

// ExitCode waits for the stub to exit and returns its exit status, or -1
// when it was not an exit status (a signal, say).
func (s *Stub) ExitCode() int {
	s.T.Helper()
	err := s.WaitExit()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.ExitCode()
	}
	return -1
}
