package ipc

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stubvisor/stubvisor/shmpool"
)

// ErrClosed is returned by a Conn used after Close, and by calls that
// Close interrupted.
var ErrClosed = errors.New("connection closed")

// ErrPeerDead is returned once the other side is known to be gone: the
// supervisor's reaper set the dead word (MarkDead), the supervisor closed
// the region, or (in a stub) the parent process changed.
var ErrPeerDead = errors.New("peer dead")

// ErrTimeout is returned by Recv when its deadline passes first.
var ErrTimeout = errors.New("timed out")

// ErrFrameTooLarge is returned by Send for a message whose encoding does
// not fit in half a ring; bulk data belongs in an arena.
var ErrFrameTooLarge = errors.New("frame too large")

// ErrProtocol is returned when the peer broke the protocol: a corrupt ring
// index or frame, or a message that does not decode.
var ErrProtocol = errors.New("protocol violation")

// ErrBadRegion is returned by Attach for a file that is not a region this
// package laid out.
var ErrBadRegion = errors.New("not a stubvisor region")

// ErrVersion is returned by Attach when the region speaks another protocol
// version.
var ErrVersion = errors.New("protocol version mismatch")

// Settings are the protocol parameters a supervisor writes into a region's
// header. The stub takes them from there, never from its own flags.
type Settings struct {
	// Pool sizes each of the two arenas.
	Pool shmpool.Settings
	// RingBytes is the data size of each ring: a power of two.
	RingBytes uint32
	// Spin is the longest a waiter polls before it sleeps on the futex;
	// each waiter polls less, or not at all, while polling does not pay
	// (spin.go). The supervisor's ring reader chooses per call instead
	// (RecvSpin).
	Spin time.Duration
}

// DefaultSettings returns 1 MiB rings, arenas of 1 MiB growing by 1 MiB up
// to 1 GiB, and a spin long enough to cover a Python stub's turnaround on a
// 2-core machine (a round trip then costs no syscall), yet short enough not
// to steal a core from a busy peer for long.
func DefaultSettings() Settings {
	return Settings{
		Pool: shmpool.Settings{
			DefaultBytes: defaultArenaDefault,
			GrowthBytes:  defaultArenaGrowth,
			MaxBytes:     defaultArenaMax,
		},
		RingBytes: defaultRingBytes,
		Spin:      defaultSpin,
	}
}

const (
	sideSupervisor = 0
	sideStub       = 1
)

// Conn is one side of a region: it sends on one ring, receives on the
// other, owns one arena and reads the other. Send is safe for concurrent
// use; Recv admits one caller at a time (others wait for it). Slices
// returned by Alloc and View alias the shared mapping and are valid until
// Close.
type Conn struct {
	region   *shmpool.Region
	lay      layout
	side     int
	out, in  ring
	own      *shmpool.Arena
	peer     *shmpool.PeerArena
	dead     *uint32
	stubPID  *uint32
	msgPoll  *uint32 // CtlMsgPoll
	ownBeat  *uint64
	peerBeat *uint64
	ppid     int // stub side: the supervisor's pid at attach
	spin     time.Duration
	idle     atomic.Int64 // the sleep slice of a wait without deadline (SetIdleSlice)
	maxFrame int

	// opMu is held shared by every operation and exclusively by Close, so
	// the mapping is never unmapped under a running call.
	opMu      sync.RWMutex
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	sendMu   sync.Mutex
	enc      encoder
	sendSpin spinner // waits for room; under sendMu
	recvMu   sync.Mutex
	dec      decoder
	recvSpin spinner // waits for a message; under recvMu
}

// Create makes a new region for one stub (the supervisor side): it lays
// out and writes the header, backs the header and rings, and commits
// arena 0's default size. name labels the memfd (it shows in
// /proc/<pid>/fd; nothing is created in /dev/shm). Hand File() to the
// stub as fd 3.
func Create(name string, s Settings) (_ *Conn, retErr error) {
	l, err := newLayout(s)
	if err != nil {
		return nil, err
	}
	region, err := shmpool.Create(name, l.regionSize)
	if err != nil {
		return nil, fmt.Errorf("ipc: create region: %w", err)
	}
	defer func() {
		if retErr != nil {
			region.Close()
		}
	}()
	if err := region.Grow(0, l.arena0); err != nil {
		return nil, fmt.Errorf("ipc: create region: %w", err)
	}
	l.encode(region.Bytes()[:HeaderSize])
	return newConn(region, l, sideSupervisor)
}

// Attach maps the region in f (the stub side, normally fd 3), checks its
// magic and version, records this process as the stub and commits arena
// 1's default size. It takes ownership of f, also on failure.
func Attach(f *os.File) (_ *Conn, retErr error) {
	h := make([]byte, HeaderSize)
	if _, err := f.ReadAt(h, 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("ipc: attach: read header: %w: %w", ErrBadRegion, err)
	}
	l, err := decodeLayout(h)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("ipc: attach: %w", err)
	}
	region, err := shmpool.Open(f, l.regionSize)
	if err != nil {
		return nil, fmt.Errorf("ipc: attach: %w", err)
	}
	defer func() {
		if retErr != nil {
			region.Close()
		}
	}()
	if fs, err := region.FileSize(); err != nil {
		return nil, fmt.Errorf("ipc: attach: %w", err)
	} else if fs < l.arena0 {
		return nil, fmt.Errorf("ipc: attach: region file of %d bytes does not back its rings: %w", fs, ErrBadRegion)
	}
	c, err := newConn(region, l, sideStub)
	if err != nil {
		return nil, err
	}
	c.ppid = getppid()
	atomic.StoreUint32(c.stubPID, uint32(os.Getpid()))
	return c, nil
}

func newConn(region *shmpool.Region, l layout, side int) (*Conn, error) {
	c := &Conn{
		region:   region,
		lay:      l,
		side:     side,
		dead:     region.Uint32(CtlDead),
		stubPID:  region.Uint32(CtlStubPID),
		msgPoll:  region.Uint32(CtlMsgPoll),
		spin:     time.Duration(l.spinNs),
		maxFrame: MaxPayload(l.ringBytes),
	}
	r0, err := newRing(region, l.ring0, l.ringBytes)
	if err != nil {
		return nil, fmt.Errorf("ipc: ring 0: %w", err)
	}
	r1, err := newRing(region, l.ring1, l.ringBytes)
	if err != nil {
		return nil, fmt.Errorf("ipc: ring 1: %w", err)
	}
	pool := shmpool.Settings{DefaultBytes: l.arenaDefault, GrowthBytes: l.arenaGrowth, MaxBytes: l.arenaMax}
	ownOff, ownUsage, peerOff, peerUsage := l.arena0, uint64(CtlArena0Usage), l.arena1, uint64(CtlArena1Usage)
	c.out, c.in = r0, r1
	c.ownBeat, c.peerBeat = region.Uint64(CtlSupHeartbeat), region.Uint64(CtlStubHeartbeat)
	if side == sideStub {
		ownOff, ownUsage, peerOff, peerUsage = peerOff, peerUsage, ownOff, ownUsage
		c.out, c.in = r1, r0
		c.ownBeat, c.peerBeat = c.peerBeat, c.ownBeat
	}
	if c.own, err = shmpool.NewArena(region, ownOff, pool, ownUsage); err != nil {
		return nil, fmt.Errorf("ipc: own arena: %w", err)
	}
	if c.peer, err = shmpool.NewPeerArena(region, peerOff, l.arenaMax, peerUsage); err != nil {
		return nil, fmt.Errorf("ipc: peer arena: %w", err)
	}
	c.enc.init()
	return c, nil
}

// File returns the region's memfd, for the stub's ExtraFiles[0] (fd 3). It
// stays owned by the Conn.
func (c *Conn) File() *os.File { return c.region.File() }

// Settings returns the protocol parameters of the region, as its header
// records them.
func (c *Conn) Settings() Settings {
	return Settings{
		Pool:      shmpool.Settings{DefaultBytes: c.lay.arenaDefault, GrowthBytes: c.lay.arenaGrowth, MaxBytes: c.lay.arenaMax},
		RingBytes: c.lay.ringBytes,
		Spin:      time.Duration(c.lay.spinNs),
	}
}

// MaxFrame returns the largest encoded message Send accepts.
func (c *Conn) MaxFrame() int { return c.maxFrame }

// begin admits an operation unless the Conn is closed; end it with
// c.opMu.RUnlock.
func (c *Conn) begin() error {
	c.opMu.RLock()
	if c.closed.Load() {
		c.opMu.RUnlock()
		return ErrClosed
	}
	return nil
}

// Send encodes m and queues it on the outgoing ring. It blocks while the
// ring is full, in bounded sleep slices, until there is room, the peer is
// dead (ErrPeerDead) or the Conn is closed (ErrClosed).
func (c *Conn) Send(m Message) error {
	if err := c.begin(); err != nil {
		return fmt.Errorf("ipc: send: %w", err)
	}
	defer c.opMu.RUnlock()
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if atomic.LoadUint32(c.dead) != 0 {
		return fmt.Errorf("ipc: send: %w", ErrPeerDead)
	}
	b, err := c.enc.encode(m)
	if err != nil {
		return err
	}
	return c.push(b)
}

// Recv returns the next message. It waits until deadline (a zero deadline
// waits without limit), returning ErrTimeout, ErrPeerDead or ErrClosed when
// no message comes. A frame that does not decode is consumed and reported
// as ErrProtocol. Concurrent callers take turns.
func (c *Conn) Recv(deadline time.Time) (Message, error) {
	return c.RecvSpin(deadline, c.recvLimit())
}

// recvLimit is the longest a Recv polls: this side's spin, or on the
// stub's side the supervisor's longer msg_poll when it is set.
func (c *Conn) recvLimit() time.Duration {
	if c.side == sideStub {
		return max(c.spin, time.Duration(atomic.LoadUint32(c.msgPoll)))
	}
	return c.spin
}

// RecvSpin is Recv polling for spin, instead of this side's setting,
// before it sleeps: a caller that knows an answer is due soon, and that
// nothing else needs the CPU, can wait for it without a system call.
func (c *Conn) RecvSpin(deadline time.Time, spin time.Duration) (Message, error) {
	if err := c.begin(); err != nil {
		return nil, fmt.Errorf("ipc: recv: %w", err)
	}
	defer c.opMu.RUnlock()
	c.recvMu.Lock()
	defer c.recvMu.Unlock()
	var m Message
	err := c.pop(deadline, spin, func(b []byte) (err error) {
		m, err = c.dec.decode(b)
		return err
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// SetIdleSlice sets how long a wait without deadline sleeps between its
// checks of death and of the parent (250 ms unless set). A stub whose own
// heartbeat checks its parent every beat, and which dies with its parent
// anyway (Pdeathsig), lengthens it so that an idle stub does not wake
// for nothing; the reaper's and Close's futex wakes end the wait at once
// whatever the slice.
func (c *Conn) SetIdleSlice(d time.Duration) {
	if d > 0 {
		c.idle.Store(int64(d))
	}
}

// alive reports ErrClosed or ErrPeerDead when waiting is pointless.
func (c *Conn) alive() error {
	if c.closed.Load() {
		return ErrClosed
	}
	if atomic.LoadUint32(c.dead) != 0 {
		return ErrPeerDead
	}
	if c.side == sideStub {
		if p := getppid(); p != c.ppid {
			return fmt.Errorf("supervisor exited (parent pid %d is now %d): %w", c.ppid, p, ErrPeerDead)
		}
	}
	return nil
}

// PeerDead reports whether the other side is known to be gone (the checks
// a blocked call makes between sleep slices).
func (c *Conn) PeerDead() bool {
	return errors.Is(c.alive(), ErrPeerDead)
}

// Alloc reserves n bytes in this side's own arena and returns the block's
// offset (relative to the arena start, as a tensor descriptor carries it)
// and its bytes. Only this side frees it (Free), after the peer said it
// no longer reads it.
func (c *Conn) Alloc(n uint64) (uint64, []byte, error) {
	if err := c.begin(); err != nil {
		return 0, nil, fmt.Errorf("ipc: alloc: %w", err)
	}
	defer c.opMu.RUnlock()
	off, err := c.own.Alloc(n)
	if err != nil {
		return 0, nil, err
	}
	b, err := c.own.View(off, n)
	if err != nil {
		c.own.Free(off)
		return 0, nil, err
	}
	return off, b, nil
}

// Free returns a block of this side's own arena.
func (c *Conn) Free(off uint64) error {
	if err := c.begin(); err != nil {
		return fmt.Errorf("ipc: free: %w", err)
	}
	defer c.opMu.RUnlock()
	return c.own.Free(off)
}

// OwnBlockSize returns the size of the live block at off in this side's
// own arena, and whether there is one.
func (c *Conn) OwnBlockSize(off uint64) (uint64, bool) {
	if err := c.begin(); err != nil {
		return 0, false
	}
	defer c.opMu.RUnlock()
	return c.own.BlockSize(off)
}

// OwnLoc is the location value of this side's arena in tensor descriptors
// (LocArena0 for the supervisor, LocArena1 for a stub).
func (c *Conn) OwnLoc() uint8 {
	if c.side == sideStub {
		return LocArena1
	}
	return LocArena0
}

// View returns size bytes at off in the arena loc names, after checking
// the range against that arena's reservation, its committed size and the
// file. LocNone yields an empty slice when size is 0.
func (c *Conn) View(loc uint8, off, size uint64) ([]byte, error) {
	if err := c.begin(); err != nil {
		return nil, fmt.Errorf("ipc: view: %w", err)
	}
	defer c.opMu.RUnlock()
	switch {
	case loc == c.OwnLoc():
		return c.own.View(off, size)
	case loc == LocArena0 || loc == LocArena1:
		return c.peer.View(off, size)
	case loc == LocNone && size == 0:
		return []byte{}, nil
	}
	return nil, fmt.Errorf("ipc: view: location %d with %d bytes: %w", loc, size, shmpool.ErrOutOfBounds)
}

// MarkDead poisons the region: it sets the dead word and wakes every futex
// word, so every call blocked on either side returns ErrPeerDead. The
// supervisor's reaper calls it when the stub exits.
func (c *Conn) MarkDead() {
	if c.begin() != nil {
		return
	}
	defer c.opMu.RUnlock()
	atomic.StoreUint32(c.dead, 1)
	c.wakeAll()
}

func (c *Conn) wakeAll() {
	for _, r := range []*ring{&c.out, &c.in} {
		futexWakeAll(r.tailFutex)
		futexWakeAll(r.headFutex)
	}
}

// Beat increments this side's heartbeat word.
func (c *Conn) Beat() {
	if c.begin() != nil {
		return
	}
	defer c.opMu.RUnlock()
	atomic.AddUint64(c.ownBeat, 1)
}

// PeerHeartbeat returns the peer's heartbeat counter; a stub increments it
// every 100 ms, so a counter that stops moving is a hung stub.
func (c *Conn) PeerHeartbeat() uint64 {
	if c.begin() != nil {
		return 0
	}
	defer c.opMu.RUnlock()
	return atomic.LoadUint64(c.peerBeat)
}

// SetMsgPoll sets how long the stub may poll for its next message (the
// supervisor's side; zero: the header's spin). The supervisor lengthens it
// while a CPU is spare, where a stub that stays awake between one client's
// requests spares each of them a wake-up. A stub polling on the longer
// limit when it is set back to zero stops once it has polled for its spin.
// Setting it on a closed Conn does nothing.
func (c *Conn) SetMsgPoll(d time.Duration) {
	if c.begin() != nil {
		return
	}
	defer c.opMu.RUnlock()
	ns := uint32(min(max(d, 0), maxSpin).Nanoseconds())
	if atomic.LoadUint32(c.msgPoll) != ns {
		atomic.StoreUint32(c.msgPoll, ns)
	}
}

// MsgPoll returns what SetMsgPoll last set (zero on a closed Conn).
func (c *Conn) MsgPoll() time.Duration {
	if c.begin() != nil {
		return 0
	}
	defer c.opMu.RUnlock()
	return time.Duration(atomic.LoadUint32(c.msgPoll))
}

// StubPID returns the pid the stub wrote at attach (0 before).
func (c *Conn) StubPID() int {
	if c.begin() != nil {
		return 0
	}
	defer c.opMu.RUnlock()
	return int(atomic.LoadUint32(c.stubPID))
}

// Usage returns this side's arena figures and the ones the peer published.
func (c *Conn) Usage() (own, peer shmpool.Usage) {
	if c.begin() != nil {
		return
	}
	defer c.opMu.RUnlock()
	return c.own.Usage(), c.peer.Usage()
}

// Depths returns the bytes queued on the outgoing and incoming rings.
func (c *Conn) Depths() (out, in int) {
	if c.begin() != nil {
		return
	}
	defer c.opMu.RUnlock()
	return c.out.depth(), c.in.depth()
}

// Close unmaps the region and closes the memfd. It first wakes every call
// blocked on this Conn (they return ErrClosed) and waits for them. On the
// supervisor side it also sets the dead word, so a stub still attached
// stops waiting. Close is idempotent.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		if c.side == sideSupervisor {
			atomic.StoreUint32(c.dead, 1)
		}
		c.wakeAll()
		c.opMu.Lock()
		defer c.opMu.Unlock()
		c.closeErr = c.region.Close()
	})
	return c.closeErr
}
