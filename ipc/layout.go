package ipc

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"time"

	"github.com/stubvisor/stubvisor/shmpool"
)

// Magic is the first word of every region: "STUBVSR\x00" little-endian.
const Magic uint64 = 0x0052535642555453

// Header field offsets (see the package documentation).
const (
	HdrMagic        = 0
	HdrVersion      = 8
	HdrFlags        = 12
	HdrRegionSize   = 16
	HdrRing0Off     = 24
	HdrRing1Off     = 32
	HdrRingBytes    = 40
	HdrSpinNs       = 44
	HdrArena0Off    = 48
	HdrArena1Off    = 56
	HdrArenaMax     = 64
	HdrArenaDefault = 72
	HdrArenaGrowth  = 80
	HeaderSize      = 0x100
)

// Control block word offsets (each on its own 64-byte line).
const (
	CtlDead          = 0x100
	CtlStubPID       = 0x140
	CtlSupHeartbeat  = 0x180
	CtlStubHeartbeat = 0x1c0
	CtlArena0Usage   = 0x200
	CtlArena1Usage   = 0x240
	CtlMsgPoll       = 0x280
)

// Ring geometry: ring 0 starts at Ring0Off; each ring is RingIndexBytes of
// index words followed by ring_bytes of data.
const (
	Ring0Off            = 0x1000
	RingIndexBytes      = 0x100
	RingTail            = 0
	RingHead            = 64
	RingReaderSleeping  = 128
	RingWriterSleeping  = 192
	WrapMarker          = 0xFFFFFFFF
	FrameAlign          = 8
	MinRingBytes        = 4096
	MaxRingBytes        = 1 << 30
	FrameHeaderBytes    = 4
	waitSlice           = 20 * time.Millisecond
	idleSlice           = 250 * time.Millisecond
	yieldEvery          = 4 * time.Microsecond // a poller lets other goroutines run this often
	defaultSpin         = 50 * time.Microsecond
	maxSpin             = 10 * time.Millisecond
	defaultRingBytes    = 1 << 20
	defaultArenaDefault = 1 << 20
	defaultArenaGrowth  = 1 << 20
	defaultArenaMax     = 1 << 30
)

// MaxPayload returns the largest frame payload a ring of ringBytes
// carries. A frame (length word included) is at most half the ring, so a
// frame that has to wrap always fits once the ring has drained.
func MaxPayload(ringBytes uint32) int { return int(ringBytes/2) - FrameHeaderBytes }

// layout is the geometry recorded in a region header.
type layout struct {
	regionSize   uint64
	ring0, ring1 uint64
	ringBytes    uint32
	spinNs       uint32
	arena0       uint64
	arena1       uint64
	arenaMax     uint64
	arenaDefault uint64
	arenaGrowth  uint64
}

func pageUp(n uint64) uint64 { return (n + shmpool.PageSize - 1) &^ (shmpool.PageSize - 1) }

// newLayout places the rings and arenas for s.
func newLayout(s Settings) (layout, error) {
	if s.RingBytes < MinRingBytes || s.RingBytes > MaxRingBytes || bits.OnesCount32(s.RingBytes) != 1 {
		return layout{}, fmt.Errorf("ipc: ring size %d is not a power of two in [%d, %d]", s.RingBytes, MinRingBytes, MaxRingBytes)
	}
	if s.Spin < 0 || s.Spin > maxSpin {
		return layout{}, fmt.Errorf("ipc: spin %v outside [0, %v]", s.Spin, maxSpin)
	}
	pool, err := s.Pool.Normalize()
	if err != nil {
		return layout{}, fmt.Errorf("ipc: %w", err)
	}
	l := layout{
		ring0:        Ring0Off,
		ringBytes:    s.RingBytes,
		spinNs:       uint32(s.Spin.Nanoseconds()),
		arenaMax:     pool.MaxBytes,
		arenaDefault: pool.DefaultBytes,
		arenaGrowth:  pool.GrowthBytes,
	}
	l.ring1 = pageUp(l.ring0 + RingIndexBytes + uint64(l.ringBytes))
	l.arena0 = pageUp(l.ring1 + RingIndexBytes + uint64(l.ringBytes))
	l.arena1 = l.arena0 + l.arenaMax
	l.regionSize = l.arena1 + l.arenaMax
	return l, nil
}

func (l layout) encode(h []byte) {
	le := binary.LittleEndian
	le.PutUint64(h[HdrMagic:], Magic)
	le.PutUint32(h[HdrVersion:], ProtocolVersion)
	le.PutUint32(h[HdrFlags:], 0)
	le.PutUint64(h[HdrRegionSize:], l.regionSize)
	le.PutUint64(h[HdrRing0Off:], l.ring0)
	le.PutUint64(h[HdrRing1Off:], l.ring1)
	le.PutUint32(h[HdrRingBytes:], l.ringBytes)
	le.PutUint32(h[HdrSpinNs:], l.spinNs)
	le.PutUint64(h[HdrArena0Off:], l.arena0)
	le.PutUint64(h[HdrArena1Off:], l.arena1)
	le.PutUint64(h[HdrArenaMax:], l.arenaMax)
	le.PutUint64(h[HdrArenaDefault:], l.arenaDefault)
	le.PutUint64(h[HdrArenaGrowth:], l.arenaGrowth)
}

// decodeLayout reads and validates a header written by a supervisor. The
// geometry is checked completely, because the stub maps and indexes with it.
func decodeLayout(h []byte) (layout, error) {
	le := binary.LittleEndian
	if len(h) < HeaderSize {
		return layout{}, fmt.Errorf("ipc: header: %d bytes: %w", len(h), ErrBadRegion)
	}
	if m := le.Uint64(h[HdrMagic:]); m != Magic {
		return layout{}, fmt.Errorf("ipc: header: magic %#x: %w", m, ErrBadRegion)
	}
	if v := le.Uint32(h[HdrVersion:]); v != ProtocolVersion {
		return layout{}, fmt.Errorf("ipc: header: protocol version %d, this side speaks %d: %w", v, ProtocolVersion, ErrVersion)
	}
	l := layout{
		regionSize:   le.Uint64(h[HdrRegionSize:]),
		ring0:        le.Uint64(h[HdrRing0Off:]),
		ring1:        le.Uint64(h[HdrRing1Off:]),
		ringBytes:    le.Uint32(h[HdrRingBytes:]),
		spinNs:       le.Uint32(h[HdrSpinNs:]),
		arena0:       le.Uint64(h[HdrArena0Off:]),
		arena1:       le.Uint64(h[HdrArena1Off:]),
		arenaMax:     le.Uint64(h[HdrArenaMax:]),
		arenaDefault: le.Uint64(h[HdrArenaDefault:]),
		arenaGrowth:  le.Uint64(h[HdrArenaGrowth:]),
	}
	want, err := newLayout(Settings{
		Pool:      shmpool.Settings{DefaultBytes: l.arenaDefault, GrowthBytes: l.arenaGrowth, MaxBytes: l.arenaMax},
		RingBytes: l.ringBytes,
		Spin:      time.Duration(l.spinNs),
	})
	if err != nil {
		return layout{}, fmt.Errorf("ipc: header: %w: %w", ErrBadRegion, err)
	}
	if want != l {
		return layout{}, fmt.Errorf("ipc: header: geometry is not the one this version lays out: %w", ErrBadRegion)
	}
	return l, nil
}
