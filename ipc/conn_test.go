package ipc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stubvisor/stubvisor/shmpool"
)

// deathBound is how soon after a peer's death every blocked call must
// return. Death is noticed at once (a futex wake, not a poll), typically in
// well under a millisecond; the bound leaves room for a machine whose cores
// are busy with other tests, so that only a lost wake-up fails it.
const deathBound = 500 * time.Millisecond

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

// eachPeer runs body in a subtest per peer language, each against a fresh
// region (DefaultSettings changed by tune, when not nil) and a peer
// playing role, checking that nothing leaks.
func eachPeer(t *testing.T, tune func(*Settings), role string, body func(t *testing.T, c *Conn, p *peer)) {
	for _, lang := range langs {
		t.Run(lang, func(t *testing.T) {
			noLeaks(t)
			s := DefaultSettings()
			if tune != nil {
				tune(&s)
			}
			c := testConn(t, s)
			body(t, c, startPeer(t, c, lang, role))
		})
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
	eachPeer(t, nil, "echo", func(t *testing.T, c *Conn, p *peer) {
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
	eachPeer(t, func(s *Settings) { s.RingBytes = MinRingBytes }, "echo", func(t *testing.T, c *Conn, p *peer) {
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
		if tail := atomic.LoadUint64(c.out.tail); tail < 50*uint64(c.Settings().RingBytes) {
			t.Fatalf("ring 0 tail %d: the test did not wrap the ring often", tail)
		}
		p.finish(t, c)
	})
}

// TestConcurrentSenders has several goroutines share one Conn's Send: every
// message must arrive whole, and each sender's messages in its order.
func TestConcurrentSenders(t *testing.T) {
	// A small ring, so senders also meet a full ring.
	eachPeer(t, func(s *Settings) { s.RingBytes = 16 << 10 }, "echo", func(t *testing.T, c *Conn, p *peer) {
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
	eachPeer(t, func(s *Settings) { s.RingBytes = MinRingBytes }, "echo", func(t *testing.T, c *Conn, p *peer) {
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
		if out > int(MinRingBytes) || in > int(MinRingBytes) {
			t.Fatalf("depths %d/%d exceed the ring size %d", out, in, MinRingBytes)
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
	eachPeer(t, func(s *Settings) { s.Pool.MaxBytes = 256 << 20 }, "serve", func(t *testing.T, c *Conn, p *peer) {
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

func TestGrowthWhilePeerHoldsViews(t *testing.T) {
	eachPeer(t, func(s *Settings) {
		s.Pool = shmpool.Settings{DefaultBytes: 64 << 10, GrowthBytes: 64 << 10, MaxBytes: 64 << 20}
	}, "serve", func(t *testing.T, c *Conn, p *peer) {
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

// TestMsgPollLiftsTheStubsSpin checks the msg_poll word: the stub's wait
// for a message polls for that long instead of its spin, the
// supervisor's waits ignore it, and it is capped.
func TestMsgPollLiftsTheStubsSpin(t *testing.T) {
	noLeaks(t)
	sup, stub := pair(t, DefaultSettings())
	if got := stub.recvLimit(); got != defaultSpin {
		t.Fatalf("stub's limit %v with the word unset, want the spin %v", got, defaultSpin)
	}
	sup.SetMsgPoll(5 * time.Millisecond)
	if got := stub.recvLimit(); got != 5*time.Millisecond {
		t.Fatalf("stub's limit %v, want 5ms", got)
	}
	if got := sup.recvLimit(); got != defaultSpin {
		t.Fatalf("supervisor's limit %v, want its spin %v", got, defaultSpin)
	}
	sup.SetMsgPoll(time.Hour)
	if got := stub.MsgPoll(); got != maxSpin {
		t.Fatalf("msg_poll %v after asking for an hour, want the cap %v", got, maxSpin)
	}
}

// TestMsgPollTakenBack checks that a stub's poll on a longer limit than
// its spin ends, once it has polled for its spin, when the supervisor's
// word is zero (taken back): a 2 s poll returns long before.
func TestMsgPollTakenBack(t *testing.T) {
	noLeaks(t)
	_, stub := pair(t, DefaultSettings())
	var word uint64 // never changes
	// A preempted poll also ends early, which would hide a poll that
	// ignores the word: such a try proves nothing, and is made again.
	for try := 1; ; try++ {
		start := time.Now()
		changed, preempted := stub.poll(&word, 0, start, 2*time.Second, time.Time{})
		el := time.Since(start)
		if changed {
			t.Fatal("poll reported a change of a word nobody wrote")
		}
		if !preempted {
			if el > time.Second {
				t.Fatalf("the poll ran %v with the longer poll taken back", el)
			}
			return
		}
		if try == 20 {
			t.Fatal("20 tries in a row ended preempted: the poll outlasts the word taken back")
		}
	}
}
