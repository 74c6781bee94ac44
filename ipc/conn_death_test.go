package ipc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
	"golang.org/x/sys/unix"
)

// killAfter kills the peer once ready() is true (polled) and returns when
// it was killed.
func killAfter(t *testing.T, p *peer, ready func() bool) <-chan time.Time {
	t.Helper()
	killed := make(chan time.Time, 1)
	go func() {
		deadline := time.Now().Add(peerTimeout)
		for !ready() && time.Now().Before(deadline) {
			runtime.Gosched()
		}
		at := time.Now()
		p.cmd.Process.Kill()
		killed <- at
	}()
	return killed
}

func TestPeerKilled(t *testing.T) {
	type scenario struct {
		name string
		role string
		// run blocks in the Conn until the peer's death surfaces as an
		// error, which it returns; kill is called once the call is in
		// the state the scenario is about.
		run func(t *testing.T, c *Conn, kill func(ready func() bool)) error
	}
	scenarios := []scenario{
		{"blocked-in-recv", "sink", func(t *testing.T, c *Conn, kill func(func() bool)) error {
			kill(func() bool { return atomic.LoadUint32(c.in.readerSleeping) != 0 })
			_, err := c.Recv(time.Now().Add(peerTimeout))
			return err
		}},
		{"blocked-in-send", "stall", func(t *testing.T, c *Conn, kill func(func() bool)) error {
			kill(func() bool { return atomic.LoadUint32(c.out.writerSleeping) != 0 })
			for {
				if err := c.Send(&LogMsg{Message: strings.Repeat("z", 300)}); err != nil {
					return err
				}
			}
		}},
		{"mid-push", "flood", func(t *testing.T, c *Conn, kill func(func() bool)) error {
			// The peer is writing frames as fast as it can when it dies;
			// every frame it published must still decode, in order.
			var line int64
			for ; line < 200; line++ {
				if got := recvKind[*LogMsg](t, c); got.Line != line {
					t.Fatalf("line %d, want %d", got.Line, line)
				}
			}
			kill(func() bool { return true })
			for ; ; line++ {
				m, err := c.Recv(time.Now().Add(peerTimeout))
				if err != nil {
					return err
				}
				if l, ok := m.(*LogMsg); !ok || l.Line != line {
					t.Fatalf("after the kill got %+v, want line %d", m, line)
				}
			}
		}},
		{"mid-pop", "sink", func(t *testing.T, c *Conn, kill func(func() bool)) error {
			for i := 0; ; i++ {
				if i == 2000 {
					kill(func() bool { return true })
				}
				if err := c.Send(&LogMsg{Message: "drained", Line: int64(i)}); err != nil {
					return err
				}
			}
		}},
	}
	for _, lang := range langs {
		for _, sc := range scenarios {
			t.Run(lang+"/"+sc.name, func(t *testing.T) {
				noLeaks(t)
				s := DefaultSettings()
				s.RingBytes = 64 << 10
				c := testConn(t, s)
				p := startPeer(t, c, lang, sc.role)
				var killed <-chan time.Time
				err := sc.run(t, c, func(ready func() bool) { killed = killAfter(t, p, ready) })
				returned := time.Now()
				if !errors.Is(err, ErrPeerDead) {
					t.Fatalf("got %v, want ErrPeerDead", err)
				}
				if killed == nil {
					t.Fatalf("the peer died before the test killed it: %v\nstderr:\n%s", err, p.stderr.String())
				}
				at := <-killed
				d := returned.Sub(at)
				if d > deathBound {
					t.Fatalf("the call returned %v after the kill, want <= %v", d, deathBound)
				}
				t.Logf("returned ErrPeerDead %v after the kill", d)
			})
		}
	}
}

// TestSupervisorKilled kills the supervisor (a helper process) while its
// stub is blocked in recv or in send; the stub must notice through its
// parent changing and give up within the bound.
func TestSupervisorKilled(t *testing.T) {
	// Orphans are re-parented to this process, so the test can reap them.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	for _, lang := range langs {
		for _, role := range []string{"orphan-recv", "orphan-send"} {
			t.Run(lang+"/"+role, func(t *testing.T) {
				noLeaks(t)
				if lang == "python" {
					ipctest.RequirePython(t)
				}
				pr, pw, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { pr.Close() })
				middle := exec.Command(os.Args[0])
				middle.Env = append(os.Environ(), roleEnv+"=middle", childLangEnv+"="+lang, childRoleEnv+"="+role)
				middle.ExtraFiles = []*os.File{pw}
				var stderr ipctest.LockedBuffer
				middle.Stderr = &stderr
				middle.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
				if err := middle.Start(); err != nil {
					t.Fatal(err)
				}
				pw.Close()
				middleDone := make(chan error, 1)
				go func() { middleDone <- middle.Wait() }()
				stubPid := 0
				t.Cleanup(func() {
					middle.Process.Kill()
					<-middleDone
					if stubPid != 0 {
						reap(t, stubPid)
					}
					if t.Failed() {
						t.Logf("stderr:\n%s", stderr.String())
					}
				})
				// Every read of the report is bounded, even if a stub hangs
				// holding the pipe open.
				if err := pr.SetReadDeadline(time.Now().Add(peerTimeout)); err != nil {
					t.Fatal(err)
				}
				report := bufio.NewReader(pr)
				ready := readReport(t, report)
				if len(ready) != 2 || ready[0] != "ready" {
					t.Fatalf("middle said %q", ready)
				}
				stubPid = int(atoi(t, ready[1]))
				killedAt := monotonicNow()
				middle.Process.Kill()
				dead := readReport(t, report)
				if len(dead) < 2 || dead[0] != "dead" {
					t.Fatalf("stub said %q", dead)
				}
				if !strings.Contains(strings.Join(dead, " "), "supervisor exited") {
					t.Errorf("stub's error %q does not say the supervisor exited", strings.Join(dead[2:], " "))
				}
				d := time.Duration(atoi(t, dead[1]) - killedAt)
				if d > deathBound {
					t.Fatalf("the stub noticed %v after the kill, want <= %v", d, deathBound)
				}
				t.Logf("the stub noticed %v after the kill", d)
			})
		}
	}
}

// reap waits for an adopted orphan, killing it if it does not exit.
func reap(t *testing.T, pid int) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		var ws unix.WaitStatus
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if err == nil && !(ws.Exited() && ws.ExitStatus() == 0) {
			err = fmt.Errorf("stub exit status %v", ws)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(peerTimeout):
		unix.Kill(pid, unix.SIGKILL)
		<-done
		t.Error("orphaned stub did not exit")
	}
}

// sleepingRecv starts a Recv on c with no deadline and returns its error
// once c's reader is asleep on the futex.
func sleepingRecv(t *testing.T, c *Conn) <-chan error {
	t.Helper()
	recvErr := make(chan error, 1)
	go func() {
		_, err := c.Recv(time.Time{})
		recvErr <- err
	}()
	waitFlag(t, c.in.readerSleeping, "recv to sleep")
	return recvErr
}

func TestCloseUnblocksAndIsFinal(t *testing.T) {
	noLeaks(t)
	sup, _ := pair(t, DefaultSettings())
	recvErr := sleepingRecv(t, sup)
	if err := sup.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-recvErr; !errors.Is(err, ErrClosed) {
		t.Fatalf("blocked recv got %v, want ErrClosed", err)
	}
	if err := sup.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	calls := map[string]error{}
	_, calls["recv"] = sup.Recv(time.Now())
	calls["send"] = sup.Send(&FinalizeMsg{})
	_, _, calls["alloc"] = sup.Alloc(1)
	calls["free"] = sup.Free(0)
	_, calls["view"] = sup.View(LocArena0, 0, 1)
	for name, err := range calls {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after close: %v, want ErrClosed", name, err)
		}
	}
}

func TestSupervisorCloseWakesStub(t *testing.T) {
	noLeaks(t)
	sup, stub := pair(t, DefaultSettings())
	recvErr := sleepingRecv(t, stub)
	sup.Close()
	if err := <-recvErr; !errors.Is(err, ErrPeerDead) {
		t.Fatalf("stub recv got %v, want ErrPeerDead", err)
	}
	if !stub.PeerDead() {
		t.Fatal("PeerDead is false after the supervisor closed")
	}
}
