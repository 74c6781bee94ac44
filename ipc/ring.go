package ipc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/stubvisor/stubvisor/shmpool"
)

// The rings: a frame pushed by one side and popped by the other, with the
// futex handshake that wakes a sleeping reader or writer (doc.go draws the
// layout). Conn (conn.go) owns two of them.

// ring is one direction's SPSC ring as seen from one side.
type ring struct {
	tail, head                     *uint64
	tailFutex, headFutex           *uint32 // the low halves of tail and head
	readerSleeping, writerSleeping *uint32
	data                           []byte
	size                           uint64
}

func newRing(r *shmpool.Region, off uint64, size uint32) (ring, error) {
	data, err := r.Slice(off+RingIndexBytes, uint64(size))
	if err != nil {
		return ring{}, err
	}
	return ring{
		tail:           r.Uint64(off + RingTail),
		head:           r.Uint64(off + RingHead),
		tailFutex:      r.Uint32(off + RingTail),
		headFutex:      r.Uint32(off + RingHead),
		readerSleeping: r.Uint32(off + RingReaderSleeping),
		writerSleeping: r.Uint32(off + RingWriterSleeping),
		data:           data,
		size:           uint64(size),
	}, nil
}

func (r *ring) depth() int {
	return int(atomic.LoadUint64(r.tail) - atomic.LoadUint64(r.head))
}

// push writes one frame; c.sendMu is held.
func (c *Conn) push(b []byte) error {
	if len(b) > c.maxFrame {
		return fmt.Errorf("ipc: send: %d-byte message, the ring takes %d: %w", len(b), c.maxFrame, ErrFrameTooLarge)
	}
	r := &c.out
	need := frameBytes(len(b))
	tail := atomic.LoadUint64(r.tail)
	pos := tail & (r.size - 1)
	room := r.size - pos
	total := need
	if room < need {
		total = room + need
	}
	for {
		head := atomic.LoadUint64(r.head)
		used := tail - head
		if used > r.size {
			return fmt.Errorf("ipc: send: ring indices head %d tail %d: %w", head, tail, ErrProtocol)
		}
		if r.size-used >= total {
			break
		}
		if err := c.waitChange(r.head, head, r.headFutex, r.writerSleeping, time.Time{}, c.spin, &c.sendSpin); err != nil {
			return fmt.Errorf("ipc: send: %w", err)
		}
	}
	le := binary.LittleEndian
	if room < need {
		le.PutUint32(r.data[pos:], WrapMarker)
		tail += room
		pos = 0
	}
	le.PutUint32(r.data[pos:], uint32(len(b)))
	copy(r.data[pos+FrameHeaderBytes:], b)
	// The store is sequentially consistent (a full fence), so the load of
	// reader_sleeping below cannot move before it: either the reader sees
	// the new tail before it sleeps, or we see its flag and wake it.
	atomic.StoreUint64(r.tail, tail+need)
	if atomic.LoadUint32(r.readerSleeping) != 0 {
		futexWakeAll(r.tailFutex)
	}
	return nil
}

func frameBytes(n int) uint64 {
	return (uint64(n) + FrameHeaderBytes + FrameAlign - 1) &^ (FrameAlign - 1)
}

// pop hands the next frame's payload to use, in place in the ring, then
// consumes the frame; c.recvMu is held.
func (c *Conn) pop(deadline time.Time, spin time.Duration, use func([]byte) error) error {
	r := &c.in
	le := binary.LittleEndian
	head := atomic.LoadUint64(r.head)
	for {
		tail := atomic.LoadUint64(r.tail)
		if tail == head {
			if err := c.waitChange(r.tail, tail, r.tailFutex, r.readerSleeping, deadline, spin, &c.recvSpin); err != nil {
				return fmt.Errorf("ipc: recv: %w", err)
			}
			continue
		}
		avail := tail - head
		if avail > r.size {
			return fmt.Errorf("ipc: recv: ring indices head %d tail %d: %w", head, tail, ErrProtocol)
		}
		pos := head & (r.size - 1)
		n := le.Uint32(r.data[pos:])
		if n == WrapMarker {
			if skip := r.size - pos; skip <= avail {
				head += skip
				c.consumed(r, head)
				continue
			}
			return fmt.Errorf("ipc: recv: wrap marker at %d with %d bytes queued: %w", pos, avail, ErrProtocol)
		}
		if int64(n) > int64(c.maxFrame) || pos+FrameHeaderBytes+uint64(n) > r.size || frameBytes(int(n)) > avail {
			return fmt.Errorf("ipc: recv: frame of %d bytes at %d with %d bytes queued: %w", n, pos, avail, ErrProtocol)
		}
		err := use(r.data[pos+FrameHeaderBytes : pos+FrameHeaderBytes+uint64(n)])
		c.consumed(r, head+frameBytes(int(n)))
		return err
	}
}

// consumed publishes a new head and wakes a writer waiting for room.
func (c *Conn) consumed(r *ring, head uint64) {
	atomic.StoreUint64(r.head, head)
	if atomic.LoadUint32(r.writerSleeping) != 0 {
		futexWakeAll(r.headFutex)
	}
}

// waitChange waits until *word != old: it polls for up to the spinner's
// budget (at most spin), then sleeps on the futex in slices, announcing
// the sleep in flag first (the Dekker handshake the producer completes).
// A slice is short (waitSlice) when the caller has a deadline and long
// (idleSlice) when it waits without one: between slices it re-checks
// death and Close, which the reaper and Close also announce with a futex
// wake, so the long slice only backs those up (and bounds how late a
// stub notices that its parent changed) and an idle waiter wakes four
// times a second.
func (c *Conn) waitChange(word *uint64, old uint64, fword, flag *uint32, deadline time.Time, spin time.Duration, sp *spinner) error {
	hasDeadline := !deadline.IsZero()
	start := time.Now()
	budget := sp.next(spin)
	if budget > 0 {
		polled, preempted := c.poll(word, old, start, budget, deadline)
		if polled || preempted {
			sp.done(spin, time.Since(start), polled, preempted)
		}
		if polled {
			return nil
		}
	}
	err := c.sleepChange(word, old, fword, flag, deadline, hasDeadline)
	switch waited := time.Since(start); {
	case err == nil:
		sp.done(spin, waited, false, false)
	case errors.Is(err, ErrTimeout) && waited >= spin:
		// A timeout says only that the answer is later than the wait:
		// news when the wait outlasted the limit, none for a drain.
		sp.done(spin, waited, false, false)
	}
	return err
}

// poll spins until *word != old (true), the budget or deadline passes,
// the conn dies, or the clock shows the thread was descheduled
// (preempted).
func (c *Conn) poll(word *uint64, old uint64, start time.Time, budget time.Duration, deadline time.Time) (changed, preempted bool) {
	until := start.Add(budget)
	if !deadline.IsZero() && deadline.Before(until) {
		until = deadline
	}
	last := start
	nextGosched := start.Add(yieldEvery)
	yield := runtime.GOMAXPROCS(0) == 1
	// A stub's poll past its spin was allowed by the supervisor's
	// msg_poll word, which it may take back while the poll runs (it gave
	// the spare CPU to another stub): the poll then ends as if its budget
	// had been the spin.
	lifted := c.side == sideStub && budget > c.spin
	for i := 1; ; i++ {
		if atomic.LoadUint64(word) != old {
			return true, false
		}
		if i%32 != 0 {
			continue
		}
		now := time.Now()
		if now.Sub(last) > preemptGap {
			return atomic.LoadUint64(word) != old, true
		}
		last = now
		if c.closed.Load() || atomic.LoadUint32(c.dead) != 0 || !now.Before(until) {
			return false, false
		}
		if lifted && now.Sub(start) >= c.spin && atomic.LoadUint32(c.msgPoll) == 0 {
			return false, false
		}
		// With a single P, let this process's other goroutines have it
		// now and then (no system call: the OS thread keeps the CPU).
		// With more, they run on the others: a Gosched would only wake
		// an idle one (the runtime's wakep) to find nothing to do, a
		// context switch every few microseconds of polling.
		if yield && now.After(nextGosched) {
			runtime.Gosched()
			nextGosched = now.Add(yieldEvery)
		}
	}
}

// sleepChange sleeps on the futex until *word != old, in slices.
func (c *Conn) sleepChange(word *uint64, old uint64, fword, flag *uint32, deadline time.Time, hasDeadline bool) error {
	for {
		if err := c.alive(); err != nil {
			return err
		}
		slice := idleSlice
		if d := c.idle.Load(); d > 0 {
			slice = time.Duration(d)
		}
		if hasDeadline {
			rem := time.Until(deadline)
			if rem <= 0 {
				if atomic.LoadUint64(word) != old {
					return nil
				}
				return ErrTimeout
			}
			slice = min(waitSlice, rem)
		}
		atomic.StoreUint32(flag, 1)
		if atomic.LoadUint64(word) != old {
			atomic.StoreUint32(flag, 0)
			return nil
		}
		futexWaitOn(fword, uint32(old), slice)
		atomic.StoreUint32(flag, 0)
		if atomic.LoadUint64(word) != old {
			return nil
		}
	}
}
