package ipc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
	"github.com/stubvisor/stubvisor/shmpool"
)

// deathBound is how soon after a peer's death every blocked call must
// return.
const deathBound = 100 * time.Millisecond

// sampleMessages covers every kind with edge values.
func sampleMessages() []Message {
	long := strings.Repeat("é", 40000) // 80,000 bytes: a str32 length
	tensor := Tensor{Name: "INPUT0", DataType: 11, Shape: []int64{-1, 3, 1 << 40}, Loc: LocArena0, Offset: 1 << 33, Size: 4096}
	req := Request{
		Handle: 1<<64 - 1, ID: "req-1", CorrelationID: "seq-α", Flags: 3,
		Inputs:           []Tensor{tensor, {Name: "EMPTY", DataType: 13, Shape: []int64{0}, Loc: LocNone}},
		RequestedOutputs: []string{"OUTPUT0", "OUTPUT1"}, ParametersJSON: `{"k":1}`, TimeoutMicros: 1500,
	}
	resp := Response{Handle: 7, Flags: FlagFinal, Error: &Error{Code: 3, Message: "bad input"}, Outputs: []Tensor{tensor}, ParametersJSON: "{}"}
	return []Message{
		&InitializeMsg{ID: 1, Args: map[string]string{"model_name": "add_sub", "model_instance_name": "add_sub_0_0"},
			Options: map[string]any{"decoupled": true, "model_file": "/m/1/model.py", "n": int64(-5), "big": uint64(1 << 63), "f": 1.5, "list": []any{int64(1), "x", nil}}},
		&ExecuteMsg{BatchID: 2, Requests: []Request{req, {Handle: 2, CorrelationID: uint64(42), Inputs: []Tensor{}, RequestedOutputs: []string{}}}},
		&FinalizeMsg{ID: 3},
		&ReleaseMsg{Offsets: []uint64{0, 64, 1 << 40}},
		&CancelMsg{Handle: 1<<64 - 1},
		&IsReadyMsg{ID: 4},
		&CollectMetricsMsg{ID: 12},
		&AutoCompleteMsg{ID: 5, Options: map[string]any{"model_file": "model.py"}, ConfigJSON: `{"name":"m"}`},
		&InferResultMsg{ID: 6, Response: resp},
		&HelloMsg{Version: ProtocolVersion, PID: 12345, Info: map[string]string{"python": "3.11"}},
		&ResultMsg{ID: 8, Value: "config"},
		&ResultMsg{ID: 9, Error: &Error{Code: 13, Message: long}, Value: map[string]any{"nested": map[string]any{"b": []byte{0, 1, 2}}}},
		&ResponseMsg{Response: resp},
		&ExecuteDoneMsg{BatchID: 10, Responses: []Response{resp, {Handle: 8, Outputs: []Tensor{}},
			{Handle: 9, Outputs: []Tensor{{Name: "SMALL", DataType: 11, Shape: []int64{2}, Loc: LocInline, Size: 8, Data: []byte{1, 2, 3, 4, 5, 6, 7, 8}}}}}},
		&ExecuteDoneMsg{BatchID: 11, Error: &Error{Code: 13, Message: "execute raised"}, Responses: []Response{}},
		&ExecuteDoneMsg{BatchID: 12, Responses: []Response{}, Rescheduled: []uint64{3, 1 << 40}},
		&ExecuteDoneMsg{BatchID: 13, Responses: []Response{}, Rescheduled: []uint64{}, Open: []uint64{4}},
		&LogMsg{Level: "error", Message: "line\nbreak", File: "model.py", Line: -1},
		&InferExecMsg{ID: 12, ModelName: "bls_target", ModelVersion: -1, Request: req, Decoupled: true},
		&FreeMsg{Offsets: []uint64{}},
		&InferCancelMsg{ID: 13},
		&ModelControlMsg{ID: 14, Op: "load", Model: "m", Options: map[string]any{"config": "{}", "files": map[string]any{"file:1/model.py": []byte("x")}}},
		&ControlResultMsg{ID: 14, Error: &Error{Code: 3, Message: "failed to load 'm'"}},
		&ControlResultMsg{ID: 15, Value: true},
	}
}

// normalized is m after one encode/decode: what any correct peer echoes.
func normalized(t *testing.T, m Message) Message {
	t.Helper()
	b, err := NewEncoder().Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	n, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRoundTrip(t *testing.T) {
	for _, lang := range langs {
		t.Run(lang, func(t *testing.T) {
			noLeaks(t)
			c := testConn(t, DefaultSettings())
			p := startPeer(t, c, lang, "echo")
			for _, m := range sampleMessages() {
				if m.Kind() == KindFinalize {
					continue // ends the echo; finish sends it
				}
				if err := c.Send(m); err != nil {
					t.Fatalf("send %T: %v", m, err)
				}
				got, err := c.Recv(time.Now().Add(peerTimeout))
				if err != nil {
					t.Fatalf("recv echo of %T: %v", m, err)
				}
				if want := normalized(t, m); !reflect.DeepEqual(got, want) {
					t.Errorf("echo of %T:\n got %#v\nwant %#v", m, got, want)
				}
			}
			p.finish(t, c)
		})
	}
}

// logOfSize returns a Log message whose encoding is exactly n bytes.
func logOfSize(t *testing.T, n int, line int64) *LogMsg {
	t.Helper()
	// A string header grows by a byte at 32 characters, so some totals
	// need a longer file name instead.
	for file := "f"; len(file) < 4; file += "g" {
		m := &LogMsg{Level: "info", File: file, Line: line}
		base, _ := NewEncoder().Encode(m)
		for pad := n - len(base); pad >= 0; pad-- {
			m.Message = strings.Repeat("w", pad)
			if b, _ := NewEncoder().Encode(m); len(b) == n {
				return m
			}
		}
	}
	t.Fatalf("no log message encodes to %d bytes", n)
	return nil
}

func TestRingWrapAround(t *testing.T) {
	for _, lang := range langs {
		t.Run(lang, func(t *testing.T) {
			noLeaks(t)
			s := DefaultSettings()
			s.RingBytes = MinRingBytes
			c := testConn(t, s)
			p := startPeer(t, c, lang, "echo")
			// Sizes walk through every frame alignment and up to the
			// largest frame, so wrap markers land at every offset and
			// frames end exactly at the ring's end.
			sent := 0
			for i := 0; i < 600; i++ {
				size := 24 + (i*61)%(c.MaxFrame()-24+1)
				if i%50 == 49 {
					size = c.MaxFrame()
				}
				m := logOfSize(t, size, int64(i))
				if err := c.Send(m); err != nil {
					t.Fatalf("send %d bytes: %v", size, err)
				}
				sent += int(frameBytes(size))
				got := recvKind[*LogMsg](t, c)
				if !reflect.DeepEqual(got, m) {
					t.Fatalf("frame %d of %d bytes came back as line %d with %d-byte text", i, size, got.Line, len(got.Message))
				}
			}
			if tail := atomic.LoadUint64(c.out.tail); tail < 50*uint64(s.RingBytes) {
				t.Fatalf("ring 0 tail %d: the test did not wrap the ring often", tail)
			}
			p.finish(t, c)
		})
	}
}

// TestConcurrentSenders has several goroutines share one Conn's Send: every
// message must arrive whole, and each sender's messages in its order.
func TestConcurrentSenders(t *testing.T) {
	for _, lang := range langs {
		t.Run(lang, func(t *testing.T) {
			noLeaks(t)
			s := DefaultSettings()
			s.RingBytes = 16 << 10 // small, so senders also meet a full ring
			c := testConn(t, s)
			p := startPeer(t, c, lang, "echo")
			const senders, each = 4, 500
			errs := make(chan error, senders)
			for g := range senders {
				go func() {
					for i := range each {
						m := &LogMsg{Level: "info", Message: strings.Repeat("s", 50+g*40), File: fmt.Sprint(g), Line: int64(i)}
						if err := c.Send(m); err != nil {
							errs <- err
							return
						}
					}
					errs <- nil
				}()
			}
			next := make([]int64, senders)
			for range senders * each {
				m := recvKind[*LogMsg](t, c)
				var g int
				fmt.Sscan(m.File, &g)
				if g < 0 || g >= senders || m.Line != next[g] || len(m.Message) != 50+g*40 {
					t.Fatalf("sender %d: got line %d with %d bytes, want line %d", g, m.Line, len(m.Message), next[g])
				}
				next[g]++
			}
			for range senders {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			p.finish(t, c)
		})
	}
}

func TestFrameTooLarge(t *testing.T) {
	noLeaks(t)
	c := testConn(t, Settings{Pool: DefaultSettings().Pool, RingBytes: MinRingBytes})
	err := c.Send(logOfSize(t, c.MaxFrame()+1, 0))
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("send of MaxFrame+1 bytes: %v, want ErrFrameTooLarge", err)
	}
	if out, _ := c.Depths(); out != 0 {
		t.Fatalf("a refused frame left %d bytes queued", out)
	}
}

func TestBackPressure(t *testing.T) {
	for _, lang := range langs {
		t.Run(lang, func(t *testing.T) {
			noLeaks(t)
			s := DefaultSettings()
			s.RingBytes = MinRingBytes
			c := testConn(t, s)
			p := startPeer(t, c, lang, "echo")
			// 300 frames of 256 bytes are ~19 rings' worth: with nobody
			// receiving the echoes, the peer blocks on ring 1 and then
			// this sender must block on ring 0 rather than overwrite.
			const n = 300
			sendErr := make(chan error, 1)
			go func() {
				for i := range n {
					if err := c.Send(logOfSize(t, 256, int64(i))); err != nil {
						sendErr <- err
						return
					}
				}
				sendErr <- nil
			}()
			waitFlag(t, c.out.writerSleeping, "the sender to block on a full ring")
			out, in := c.Depths()
			if out > int(s.RingBytes) || in > int(s.RingBytes) {
				t.Fatalf("depths %d/%d exceed the ring size %d", out, in, s.RingBytes)
			}
			select {
			case err := <-sendErr:
				t.Fatalf("sender finished while both rings were full: %v", err)
			default:
			}
			for i := range n {
				if got := recvKind[*LogMsg](t, c); got.Line != int64(i) {
					t.Fatalf("echo %d has line %d", i, got.Line)
				}
			}
			if err := <-sendErr; err != nil {
				t.Fatal(err)
			}
			p.finish(t, c)
		})
	}
}

// waitFlag polls a shared word until it is set. The other side sets it on
// its own within microseconds; there is no event to wait on instead.
func waitFlag(t *testing.T, flag *uint32, what string) {
	t.Helper()
	deadline := time.Now().Add(peerTimeout)
	for atomic.LoadUint32(flag) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}

func fillPattern(b []byte, seed byte) {
	for i := range min(len(b), 4096) {
		b[i] = byte(i*131) ^ seed
	}
	for n := 4096; n < len(b); n *= 2 {
		copy(b[n:], b[:n])
	}
}

// execute sends one request with one input of the given bytes (allocated
// in arena 0) to a serve peer and returns the response and the input's
// offset.
func execute(t *testing.T, c *Conn, batch uint64, data []byte) (Response, uint64) {
	t.Helper()
	off, buf, err := c.Alloc(uint64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	copy(buf, data)
	in := Tensor{Name: "IN", DataType: 2, Shape: []int64{int64(len(data))}, Loc: LocArena0, Offset: off, Size: uint64(len(data))}
	if err := c.Send(&ExecuteMsg{BatchID: batch, Requests: []Request{{Handle: batch, Inputs: []Tensor{in}}}}); err != nil {
		t.Fatal(err)
	}
	done := recvKind[*ExecuteDoneMsg](t, c)
	if done.BatchID != batch || len(done.Responses) != 1 {
		t.Fatalf("execute done %+v", done)
	}
	r := done.Responses[0]
	if r.Error != nil {
		t.Fatalf("peer failed batch %d: %s", batch, r.Error.Message)
	}
	if len(r.Outputs) != 1 || r.Outputs[0].Loc != LocArena1 || r.Outputs[0].Size != uint64(len(data)) {
		t.Fatalf("outputs %+v", r.Outputs)
	}
	return r, off
}

// peerInUse asks a serve peer for its arena's bytes in use (which also
// proves it handled every message sent before).
func peerInUse(t *testing.T, c *Conn) int64 {
	t.Helper()
	if err := c.Send(&IsReadyMsg{ID: 77}); err != nil {
		t.Fatal(err)
	}
	r := recvKind[*ResultMsg](t, c)
	n, ok := r.Value.(int64)
	if r.ID != 77 || !ok {
		t.Fatalf("in-use reply %+v", r)
	}
	return n
}

func TestLargePayload(t *testing.T) {
	const size = 64 << 20
	for _, lang := range langs {
		t.Run(lang, func(t *testing.T) {
			noLeaks(t)
			s := DefaultSettings()
			s.Pool.MaxBytes = 256 << 20
			c := testConn(t, s)
			p := startPeer(t, c, lang, "serve")
			data := make([]byte, size)
			fillPattern(data, 0x5a)
			resp, inOff := execute(t, c, 1, data)
			out := resp.Outputs[0]
			got, err := c.View(out.Loc, out.Offset, out.Size)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Fatal("the 64 MiB output differs from the input")
			}
			own, peerUsage := c.Usage()
			if own.HighWater < size || peerUsage.HighWater < size || peerUsage.Committed < size {
				t.Fatalf("usage own %+v peer %+v: a 64 MiB block is not accounted", own, peerUsage)
			}
			if err := c.Send(&ReleaseMsg{Offsets: []uint64{out.Offset}}); err != nil {
				t.Fatal(err)
			}
			if n := peerInUse(t, c); n != 0 {
				t.Fatalf("peer holds %d bytes after Release", n)
			}
			if err := c.Free(inOff); err != nil {
				t.Fatal(err)
			}
			if own, _ := c.Usage(); own.InUse != 0 {
				t.Fatalf("own arena holds %d bytes after Free", own.InUse)
			}
			p.finish(t, c)
		})
	}
}

func TestGrowthWhilePeerHoldsViews(t *testing.T) {
	for _, lang := range langs {
		t.Run(lang, func(t *testing.T) {
			noLeaks(t)
			s := DefaultSettings()
			s.Pool = shmpool.Settings{DefaultBytes: 64 << 10, GrowthBytes: 64 << 10, MaxBytes: 64 << 20}
			c := testConn(t, s)
			p := startPeer(t, c, lang, "serve")
			// The first exchange leaves each side holding a view of the
			// other's arena: the peer keeps its view of this input (and
			// checks it on every later execute), this side keeps the
			// view of the peer's output.
			first := make([]byte, 1000)
			fillPattern(first, 1)
			r1, _ := execute(t, c, 1, first)
			held, err := c.View(r1.Outputs[0].Loc, r1.Outputs[0].Offset, r1.Outputs[0].Size)
			if err != nil {
				t.Fatal(err)
			}
			_, peer0 := c.Usage()
			own0, _ := c.Usage()
			for i, size := range []int{100 << 10, 300 << 10, 1 << 20, 5 << 20, 17 << 20} {
				data := make([]byte, size)
				fillPattern(data, byte(i+2))
				r, inOff := execute(t, c, uint64(i+2), data)
				out := r.Outputs[0]
				got, err := c.View(out.Loc, out.Offset, out.Size)
				if err != nil {
					t.Fatalf("view of a block past the old committed size: %v", err)
				}
				if !bytes.Equal(got, data) {
					t.Fatalf("output %d differs", i)
				}
				if !bytes.Equal(held, first) {
					t.Fatalf("held view of the peer's arena changed after growth %d", i)
				}
				if err := c.Send(&ReleaseMsg{Offsets: []uint64{out.Offset}}); err != nil {
					t.Fatal(err)
				}
				if err := c.Free(inOff); err != nil {
					t.Fatal(err)
				}
			}
			own1, peer1 := c.Usage()
			if own1.Committed < 17<<20 || own1.Committed <= own0.Committed || peer1.Committed < 17<<20 || peer1.Committed <= peer0.Committed {
				t.Fatalf("arenas did not grow: own %+v -> %+v, peer %+v -> %+v", own0, own1, peer0, peer1)
			}
			if n := peerInUse(t, c); n != int64(shmpool.BlockAlign*((1000+63)/64)) {
				t.Fatalf("peer holds %d bytes; want only the first output", n)
			}
			p.finish(t, c)
		})
	}
}

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

// pair makes a supervisor Conn and a stub Conn on the same region in this
// process (the stub attaches to a duplicate of the memfd).
func pair(t *testing.T, s Settings) (sup, stub *Conn) {
	t.Helper()
	sup = testConn(t, s)
	fd, err := unix.FcntlInt(sup.File().Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	stub, err = Attach(os.NewFile(uintptr(fd), "dup"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stub.Close() })
	return sup, stub
}

func TestCloseUnblocksAndIsFinal(t *testing.T) {
	noLeaks(t)
	sup, _ := pair(t, DefaultSettings())
	recvErr := make(chan error, 1)
	go func() {
		_, err := sup.Recv(time.Time{})
		recvErr <- err
	}()
	waitFlag(t, sup.in.readerSleeping, "recv to sleep")
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
	recvErr := make(chan error, 1)
	go func() {
		_, err := stub.Recv(time.Time{})
		recvErr <- err
	}()
	waitFlag(t, stub.in.readerSleeping, "the stub's recv to sleep")
	sup.Close()
	if err := <-recvErr; !errors.Is(err, ErrPeerDead) {
		t.Fatalf("stub recv got %v, want ErrPeerDead", err)
	}
	if !stub.PeerDead() {
		t.Fatal("PeerDead is false after the supervisor closed")
	}
}

func TestRecvDeadline(t *testing.T) {
	noLeaks(t)
	sup, stub := pair(t, DefaultSettings())
	for _, wait := range []time.Duration{0, 30 * time.Millisecond} {
		start := time.Now()
		_, err := sup.Recv(start.Add(wait))
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("recv with nothing queued: %v, want ErrTimeout", err)
		}
		if el := time.Since(start); el < wait {
			t.Fatalf("recv returned after %v, before its %v deadline", el, wait)
		}
	}
	// A message queued before the deadline is delivered even when the
	// deadline has passed by the time Recv runs.
	if err := stub.Send(&LogMsg{Line: 5}); err != nil {
		t.Fatal(err)
	}
	m, err := sup.Recv(time.Now().Add(-time.Second))
	if err != nil || m.(*LogMsg).Line != 5 {
		t.Fatalf("recv of a queued message: %v %v", m, err)
	}
}

func TestViewBounds(t *testing.T) {
	noLeaks(t)
	s := DefaultSettings()
	s.Pool = shmpool.Settings{DefaultBytes: 64 << 10, GrowthBytes: 64 << 10, MaxBytes: 1 << 20}
	sup, stub := pair(t, s)
	off, _, err := stub.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name      string
		c         *Conn
		loc       uint8
		off, size uint64
		ok        bool
	}{
		{"own block", stub, LocArena1, off, 100, true},
		{"peer block", sup, LocArena1, off, 100, true},
		{"own arena to committed end", sup, LocArena0, 0, 64 << 10, true},
		{"peer arena past committed", sup, LocArena1, 64 << 10, 1, false},
		{"own arena past committed", sup, LocArena0, 64<<10 - 1, 2, false},
		{"past the maximum", sup, LocArena0, 1 << 20, 1, false},
		{"offset overflow", sup, LocArena1, 1<<64 - 8, 16, false},
		{"huge size", stub, LocArena0, 0, 1<<64 - 1, false},
		{"no bytes", sup, LocNone, 12345, 0, true},
		{"none with bytes", sup, LocNone, 0, 1, false},
		{"unknown location", sup, 9, 0, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.c.View(tc.loc, tc.off, tc.size)
			if tc.ok {
				if err != nil || uint64(len(b)) != tc.size {
					t.Fatalf("got %d bytes, %v", len(b), err)
				}
				return
			}
			if !errors.Is(err, shmpool.ErrOutOfBounds) {
				t.Fatalf("got %v, want ErrOutOfBounds", err)
			}
		})
	}
}

func TestAttachRejects(t *testing.T) {
	cases := []struct {
		name    string
		corrupt func(h []byte)
		want    error
	}{
		{"bad magic", func(h []byte) { h[HdrMagic] ^= 0xff }, ErrBadRegion},
		{"other version", func(h []byte) { h[HdrVersion]++ }, ErrVersion},
		{"ring not a power of two", func(h []byte) { h[HdrRingBytes+1] |= 1 }, ErrBadRegion},
		{"moved arena", func(h []byte) { h[HdrArena1Off+1]++ }, ErrBadRegion},
		{"shrunk region size", func(h []byte) { h[HdrRegionSize+2]-- }, ErrBadRegion},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			noLeaks(t)
			sup := testConn(t, DefaultSettings())
			tc.corrupt(sup.region.Bytes()[:HeaderSize])
			fd, err := unix.FcntlInt(sup.File().Fd(), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			c, err := Attach(os.NewFile(uintptr(fd), "dup"))
			if err == nil {
				c.Close()
				t.Fatal("attach accepted a corrupt header")
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	t.Run("not a memfd", func(t *testing.T) {
		noLeaks(t)
		f, err := os.CreateTemp(t.TempDir(), "region")
		if err != nil {
			t.Fatal(err)
		}
		h := make([]byte, HeaderSize)
		l, _ := newLayout(DefaultSettings())
		l.encode(h)
		f.Write(h)
		f.Truncate(int64(l.arena0))
		if c, err := Attach(f); err == nil {
			c.Close()
			t.Fatal("attach accepted a regular file")
		}
	})
}

func TestUsageAndHeartbeat(t *testing.T) {
	noLeaks(t)
	sup, stub := pair(t, DefaultSettings())
	off, _, err := stub.Alloc(1000)
	if err != nil {
		t.Fatal(err)
	}
	_, peer := sup.Usage()
	if peer.InUse != 1024 || peer.HighWater != 1024 || peer.Committed != 1<<20 || peer.Max != 1<<30 {
		t.Fatalf("supervisor sees the stub's usage as %+v", peer)
	}
	if err := stub.Free(off); err != nil {
		t.Fatal(err)
	}
	if _, peer = sup.Usage(); peer.InUse != 0 || peer.HighWater != 1024 {
		t.Fatalf("after free: %+v", peer)
	}
	for range 3 {
		stub.Beat()
	}
	sup.Beat()
	if sup.PeerHeartbeat() != 3 || stub.PeerHeartbeat() != 1 {
		t.Fatalf("heartbeats %d/%d", sup.PeerHeartbeat(), stub.PeerHeartbeat())
	}
	if sup.StubPID() != os.Getpid() {
		t.Fatalf("stub pid %d", sup.StubPID())
	}
	if err := sup.Send(&LogMsg{}); err != nil {
		t.Fatal(err)
	}
	// An empty Log is 7 bytes: a 16-byte frame with its length word and
	// padding.
	if out, in := sup.Depths(); out != 16 || in != 0 {
		t.Fatalf("depths %d/%d after one 16-byte frame", out, in)
	}
	if out, in := stub.Depths(); out != 0 || in != 16 {
		t.Fatalf("stub depths %d/%d", out, in)
	}
}

func TestCorruptRingIndices(t *testing.T) {
	noLeaks(t)
	sup, _ := pair(t, DefaultSettings())
	// A tail more than a ring ahead of head can only come from a broken
	// or hostile peer.
	atomic.StoreUint64(sup.in.tail, 3<<20)
	if _, err := sup.Recv(time.Now()); !errors.Is(err, ErrProtocol) {
		t.Fatalf("recv with a corrupt tail: %v, want ErrProtocol", err)
	}
	atomic.StoreUint64(sup.in.tail, 8)
	binaryPutUint32(sup.in.data, 1<<20) // a frame longer than the queue
	if _, err := sup.Recv(time.Now()); !errors.Is(err, ErrProtocol) {
		t.Fatalf("recv of an oversized frame: %v, want ErrProtocol", err)
	}
}

func binaryPutUint32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}
