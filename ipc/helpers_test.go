package ipc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
	"github.com/stubvisor/stubvisor/shmpool/shmtest"
)

// The test binary doubles as the Go stub peer: TestMain switches on
// roleEnv before running any test.
const (
	roleEnv      = "STUBVISOR_IPC_TEST_ROLE"
	childLangEnv = "STUBVISOR_IPC_TEST_CHILD_LANG"
	childRoleEnv = "STUBVISOR_IPC_TEST_CHILD_ROLE"
	peerTimeout  = 20 * time.Second // bound on any single wait for a peer
)

func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(runRole(role))
	}
	os.Exit(m.Run())
}

// runRole plays a stub peer (roles as in testdata/peer.py).
func runRole(role string) int {
	if role == "middle" {
		return runMiddle()
	}
	c, err := Attach(os.NewFile(3, "region"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "attach:", err)
		return 2
	}
	defer c.Close()
	if err := c.Send(&HelloMsg{Version: ProtocolVersion, PID: int64(os.Getpid()), Info: map[string]string{"role": role}}); err != nil {
		fmt.Fprintln(os.Stderr, "hello:", err)
		return 2
	}
	switch role {
	case "echo":
		err = roleEcho(c)
	case "serve":
		err = roleServe(c)
	case "flood":
		for line := int64(0); err == nil; line++ {
			err = c.Send(&LogMsg{Level: "info", Message: "flood", File: "helpers_test.go", Line: line})
		}
	case "sink":
		for err == nil {
			_, err = c.Recv(time.Time{})
		}
	case "stall":
		unix.Pause() // never reads: the ring fills up; ends with SIGKILL
	case "orphan-recv", "orphan-send":
		for err == nil {
			if role == "orphan-recv" {
				_, err = c.Recv(time.Time{})
			} else {
				err = c.Send(&LogMsg{Level: "info", Message: strings.Repeat("x", 200)})
			}
		}
		now := monotonicNow()
		fmt.Fprintf(os.NewFile(4, "report"), "dead %d %v\n", now, err)
		return 0
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil && !errors.Is(err, ErrPeerDead) {
		fmt.Fprintln(os.Stderr, role+":", err)
		return 1
	}
	return 0
}

func roleEcho(c *Conn) error {
	for {
		m, err := c.Recv(time.Time{})
		if err != nil {
			return err
		}
		if f, ok := m.(*FinalizeMsg); ok {
			return c.Send(&ResultMsg{ID: f.ID})
		}
		if err := c.Send(m); err != nil {
			return err
		}
	}
}

func roleServe(c *Conn) error {
	var held, heldCopy []byte
	for {
		m, err := c.Recv(time.Time{})
		if err != nil {
			return err
		}
		switch m := m.(type) {
		case *ExecuteMsg:
			done := &ExecuteDoneMsg{BatchID: m.BatchID}
			for _, req := range m.Requests {
				resp := Response{Handle: req.Handle, Flags: FlagFinal}
				if held != nil && !bytes.Equal(held, heldCopy) {
					resp.Error = &Error{Code: 13, Message: "a held view of arena 0 changed"}
				}
				for _, in := range req.Inputs {
					if resp.Error != nil {
						break
					}
					src, err := c.View(in.Loc, in.Offset, in.Size)
					if err != nil {
						resp.Error = &Error{Code: 13, Message: err.Error()}
						break
					}
					if held == nil && in.Size <= 1<<20 {
						held, heldCopy = src, bytes.Clone(src)
					}
					off, dst, err := c.Alloc(in.Size)
					if err != nil {
						resp.Error = &Error{Code: 13, Message: err.Error()}
						break
					}
					copy(dst, src)
					out := in
					out.Loc, out.Offset = LocArena1, off
					resp.Outputs = append(resp.Outputs, out)
				}
				done.Responses = append(done.Responses, resp)
			}
			if err := c.Send(done); err != nil {
				return err
			}
		case *ReleaseMsg:
			for _, off := range m.Offsets {
				if err := c.Free(off); err != nil {
					return err
				}
			}
		case *IsReadyMsg:
			own, _ := c.Usage()
			if err := c.Send(&ResultMsg{ID: m.ID, Value: int64(own.InUse)}); err != nil {
				return err
			}
		case *FinalizeMsg:
			return c.Send(&ResultMsg{ID: m.ID})
		}
	}
}

// runMiddle plays a supervisor that is about to be SIGKILLed: it creates a
// region, starts the stub named by childLangEnv/childRoleEnv with the
// report pipe (its fd 3) as the stub's fd 4, waits until the stub is
// blocked (asleep in recv, or asleep on a full ring), says "ready <pid>"
// on the pipe and waits to be killed.
func runMiddle() int {
	report := os.NewFile(3, "report")
	s := DefaultSettings()
	s.RingBytes = MinRingBytes
	c, err := Create("middle", s)
	if err != nil {
		fmt.Fprintln(os.Stderr, "create:", err)
		return 2
	}
	cmd, err := peerCommand(os.Getenv(childLangEnv), os.Getenv(childRoleEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cmd.ExtraFiles = []*os.File{c.File(), report}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "start stub:", err)
		return 2
	}
	if _, err := c.Recv(time.Now().Add(peerTimeout)); err != nil {
		fmt.Fprintln(os.Stderr, "hello:", err)
		return 2
	}
	flag := c.out.readerSleeping // the stub asleep in recv
	if os.Getenv(childRoleEnv) == "orphan-send" {
		flag = c.in.writerSleeping // the stub asleep on a full ring
	}
	for deadline := time.Now().Add(peerTimeout); atomic.LoadUint32(flag) == 0; {
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "stub never blocked")
			return 2
		}
		// The stub gets there on its own within microseconds; polling a
		// shared word is the only way to observe it from outside.
		syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
	}
	fmt.Fprintf(report, "ready %d\n", cmd.Process.Pid)
	for { // until SIGKILL, without touching the rings
		unix.Pause()
	}
}

func monotonicNow() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// repoRoot is the repository's root: go test runs a package's tests (and
// the peers they start inherit it) in the package's directory, one below.
func repoRoot() (string, error) { return filepath.Abs("..") }

// peerCommand returns the command for a stub peer in lang ("go" re-runs
// this test binary, "python" runs testdata/peer.py) playing role. The
// caller sets ExtraFiles (fd 3 is the region).
func peerCommand(lang, role string) (*exec.Cmd, error) {
	switch lang {
	case "go":
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), roleEnv+"="+role)
		return cmd, nil
	case "python":
		root, err := repoRoot()
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(ipctest.PythonPath, filepath.Join(root, "ipc", "testdata", "peer.py"), role)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "python"))
		return cmd, nil
	}
	return nil, fmt.Errorf("unknown peer language %q", lang)
}

var langs = []string{"go", "python"}

// peer is a running stub peer with its reaper.
type peer struct {
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	stderr  ipctest.LockedBuffer
}

// testConn creates a region for one test and closes it at cleanup.
func testConn(t *testing.T, s Settings) *Conn {
	t.Helper()
	c, err := Create(t.Name(), s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return c
}

// startPeer starts a stub peer on c, waits for its Hello and registers its
// reaper: when the peer exits, the reaper marks the region dead, as the
// supervisor does. Cleanup kills the peer and waits for the reaper.
func startPeer(t *testing.T, c *Conn, lang, role string) *peer {
	t.Helper()
	if lang == "python" {
		ipctest.RequirePython(t)
	}
	cmd, err := peerCommand(lang, role)
	if err != nil {
		t.Fatal(err)
	}
	p := &peer{cmd: cmd, done: make(chan struct{})}
	cmd.ExtraFiles = []*os.File{c.File()}
	cmd.Stderr = &p.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.waitErr = cmd.Wait()
		c.MarkDead()
		close(p.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		select {
		case <-p.done:
		case <-time.After(peerTimeout):
			t.Errorf("%s peer %s not reaped", lang, role)
		}
		if t.Failed() {
			t.Logf("%s peer %s stderr:\n%s", lang, role, p.stderr.String())
		}
	})
	m, err := c.Recv(time.Now().Add(peerTimeout))
	if err != nil {
		t.Fatalf("%s peer %s: no hello: %v\nstderr:\n%s", lang, role, err, p.stderr.String())
	}
	h, ok := m.(*HelloMsg)
	if !ok || h.Version != ProtocolVersion || h.PID != int64(cmd.Process.Pid) || int(h.PID) != c.StubPID() {
		t.Fatalf("%s peer %s: bad hello %+v (stub pid word %d)", lang, role, m, c.StubPID())
	}
	return p
}

// finish asks a peer to finalize and checks it exits cleanly.
func (p *peer) finish(t *testing.T, c *Conn) {
	t.Helper()
	if err := c.Send(&FinalizeMsg{ID: 99}); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := c.Recv(time.Now().Add(peerTimeout))
		if err != nil {
			t.Fatalf("waiting for finalize result: %v", err)
		}
		if r, ok := m.(*ResultMsg); ok && r.ID == 99 {
			break
		}
	}
	select {
	case <-p.done:
	case <-time.After(peerTimeout):
		t.Fatal("peer did not exit after finalize")
	}
	if p.waitErr != nil {
		t.Fatalf("peer exit: %v\nstderr:\n%s", p.waitErr, p.stderr.String())
	}
}

// recvKind receives the next message, which must be a T.
func recvKind[T Message](t *testing.T, c *Conn) T {
	t.Helper()
	m, err := c.Recv(time.Now().Add(peerTimeout))
	if err != nil {
		t.Fatal(err)
	}
	v, ok := m.(T)
	if !ok {
		t.Fatalf("got %T %+v, want %T", m, m, v)
	}
	return v
}

// readReport reads one line from an orphan's report pipe.
func readReport(t *testing.T, r *bufio.Reader) []string {
	t.Helper()
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("report pipe: %v", err)
	}
	return strings.Fields(line)
}

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func noLeaks(t *testing.T) { shmtest.NoLeaks(t) }
