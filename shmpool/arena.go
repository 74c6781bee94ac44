package shmpool

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
)

// ErrPoolExhausted is returned when an allocation does not fit in the
// arena's maximum size.
var ErrPoolExhausted = errors.New("pool exhausted")

// ErrUnknownBlock is returned by Free for an offset that is not the start
// of a live block.
var ErrUnknownBlock = errors.New("no block allocated at this offset")

// BlockAlign is the minimum block size and the alignment of every block:
// one cache line, which also satisfies every tensor element type and lets
// numpy views over arena bytes be aligned.
const BlockAlign = 64

// MaxSettingFlag names the setting an operator raises when a pool is
// exhausted; the exhaustion error quotes it.
const MaxSettingFlag = "--shm-max-byte-size"

// Settings size one arena. Both arenas of a region use the same settings.
type Settings struct {
	// DefaultBytes are committed when the arena is created.
	DefaultBytes uint64
	// GrowthBytes is the smallest step by which committed bytes grow.
	GrowthBytes uint64
	// MaxBytes is the reservation: committed bytes never exceed it.
	MaxBytes uint64
}

// Normalize returns s with every size rounded up to a whole page, the
// default capped at the maximum, and a zero growth step replaced by one
// page. It fails when MaxBytes is zero.
func (s Settings) Normalize() (Settings, error) {
	if s.MaxBytes == 0 {
		return s, fmt.Errorf("shmpool: settings: maximum size is zero")
	}
	if s.MaxBytes > 1<<46 || s.DefaultBytes > 1<<46 || s.GrowthBytes > 1<<46 {
		return s, fmt.Errorf("shmpool: settings: sizes above 64 TiB are not supported")
	}
	s.MaxBytes = roundUp(s.MaxBytes, PageSize)
	s.DefaultBytes = min(roundUp(s.DefaultBytes, PageSize), s.MaxBytes)
	s.GrowthBytes = roundUp(max(s.GrowthBytes, 1), PageSize)
	return s, nil
}

// Usage is an arena's figures as its owner publishes them.
type Usage struct {
	Committed uint64 // bytes backed by the file
	InUse     uint64 // bytes in live blocks
	HighWater uint64 // the most bytes ever in live blocks at once
	Max       uint64 // the reservation (the pool maximum)
}

// UsageWords is the size of an arena's published usage: three
// little-endian u64 words (committed, in use, high water).
const UsageWords = 24

type extent struct{ off, size uint64 }

// Arena is the owner's side of one arena: an address-ordered first-fit
// allocator with coalescing whose bookkeeping stays in this process. The
// lowest fitting address wins, which keeps live blocks packed at the start
// of the arena so committed bytes only grow when live data needs them.
// Arena is safe for concurrent use.
type Arena struct {
	r     *Region
	base  uint64 // region offset of the arena
	s     Settings
	words [3]*uint64 // published committed, in use, high water

	committed atomic.Uint64

	mu        sync.Mutex
	free      []extent          // sorted by off, never adjacent
	used      map[uint64]uint64 // block offset -> size
	inUse     uint64
	highWater uint64
}

// NewArena takes ownership of the arena at region offset base, reserving
// s.MaxBytes (normalized), publishing usage at region offset usageOff (24
// bytes, 8-aligned), and commits s.DefaultBytes.
func NewArena(r *Region, base uint64, s Settings, usageOff uint64) (*Arena, error) {
	s, err := s.Normalize()
	if err != nil {
		return nil, err
	}
	if base%PageSize != 0 || base+s.MaxBytes < base || base+s.MaxBytes > r.size {
		return nil, fmt.Errorf("shmpool: arena at %d of %s does not fit a %s region: %w", base, FormatBytes(s.MaxBytes), FormatBytes(r.size), ErrOutOfBounds)
	}
	a := &Arena{
		r:    r,
		base: base,
		s:    s,
		free: []extent{{0, s.MaxBytes}},
		used: make(map[uint64]uint64),
	}
	for i := range a.words {
		a.words[i] = r.Uint64(usageOff + uint64(i)*8)
	}
	if err := r.Grow(base, s.DefaultBytes); err != nil {
		return nil, fmt.Errorf("shmpool: commit arena default: %w", err)
	}
	a.committed.Store(s.DefaultBytes)
	a.publish()
	return a, nil
}

// Settings returns the arena's normalized settings.
func (a *Arena) Settings() Settings { return a.s }

// Base returns the arena's region offset.
func (a *Arena) Base() uint64 { return a.base }

// Alloc reserves a block of at least n bytes (n rounded up to BlockAlign)
// and returns its offset relative to the arena start. Committed bytes grow
// by at least the growth step when the block ends past them. When the
// block cannot fit under the maximum, the error wraps ErrPoolExhausted and
// names the limit and the setting that raises it.
func (a *Arena) Alloc(n uint64) (uint64, error) {
	size := roundUp(max(n, 1), BlockAlign)
	a.mu.Lock()
	defer a.mu.Unlock()
	if size < n || size > a.s.MaxBytes {
		return 0, a.exhausted(n)
	}
	i := 0
	for i < len(a.free) && a.free[i].size < size {
		i++
	}
	if i == len(a.free) {
		return 0, a.exhausted(n)
	}
	off := a.free[i].off
	if end, committed := off+size, a.committed.Load(); end > committed {
		grown := min(max(committed+a.s.GrowthBytes, roundUp(end, PageSize)), a.s.MaxBytes)
		if err := a.r.Grow(a.base+committed, grown-committed); err != nil {
			return 0, fmt.Errorf("shmpool: allocate %s: %w", FormatBytes(n), err)
		}
		a.committed.Store(grown)
	}
	if a.free[i].size == size {
		a.free = append(a.free[:i], a.free[i+1:]...)
	} else {
		a.free[i].off += size
		a.free[i].size -= size
	}
	a.used[off] = size
	a.inUse += size
	a.highWater = max(a.highWater, a.inUse)
	a.publish()
	return off, nil
}

func (a *Arena) exhausted(n uint64) error {
	return fmt.Errorf("shmpool: allocate %s: pool maximum of %s reached, %s in use (raise %s): %w",
		FormatBytes(n), FormatBytes(a.s.MaxBytes), FormatBytes(a.inUse), MaxSettingFlag, ErrPoolExhausted)
}

// Free returns the block at off (an offset Alloc returned) to the arena.
func (a *Arena) Free(off uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	size, ok := a.used[off]
	if !ok {
		return fmt.Errorf("shmpool: free offset %d: %w", off, ErrUnknownBlock)
	}
	delete(a.used, off)
	a.inUse -= size
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].off > off })
	mergePrev := i > 0 && a.free[i-1].off+a.free[i-1].size == off
	mergeNext := i < len(a.free) && off+size == a.free[i].off
	switch {
	case mergePrev && mergeNext:
		a.free[i-1].size += size + a.free[i].size
		a.free = append(a.free[:i], a.free[i+1:]...)
	case mergePrev:
		a.free[i-1].size += size
	case mergeNext:
		a.free[i].off = off
		a.free[i].size += size
	default:
		a.free = append(a.free, extent{})
		copy(a.free[i+1:], a.free[i:])
		a.free[i] = extent{off, size}
	}
	a.publish()
	return nil
}

// BlockSize returns the size of the live block at off.
func (a *Arena) BlockSize(off uint64) (uint64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n, ok := a.used[off]
	return n, ok
}

// Blocks returns the number of live blocks.
func (a *Arena) Blocks() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.used)
}

// View returns the arena bytes [off, off+n), checked against the
// reservation and the committed size.
func (a *Arena) View(off, n uint64) ([]byte, error) {
	return view(a.r, a.base, a.s.MaxBytes, a.committed.Load(), off, n)
}

// Usage returns the arena's figures.
func (a *Arena) Usage() Usage {
	a.mu.Lock()
	defer a.mu.Unlock()
	return Usage{Committed: a.committed.Load(), InUse: a.inUse, HighWater: a.highWater, Max: a.s.MaxBytes}
}

// publish stores the usage words; a.mu is held.
func (a *Arena) publish() {
	atomic.StoreUint64(a.words[0], a.committed.Load())
	atomic.StoreUint64(a.words[1], a.inUse)
	atomic.StoreUint64(a.words[2], a.highWater)
}

// PeerArena is the read side of an arena the other process owns: views of
// its blocks and its published usage. Every range is checked, since the
// offsets come from the peer.
type PeerArena struct {
	r     *Region
	base  uint64
	max   uint64
	words [3]*uint64
}

// NewPeerArena describes the peer's arena at region offset base with the
// reservation max, whose usage the peer publishes at usageOff.
func NewPeerArena(r *Region, base, max, usageOff uint64) (*PeerArena, error) {
	if base+max < base || base+max > r.size {
		return nil, fmt.Errorf("shmpool: peer arena at %d of %s does not fit a %s region: %w", base, FormatBytes(max), FormatBytes(r.size), ErrOutOfBounds)
	}
	p := &PeerArena{r: r, base: base, max: max}
	for i := range p.words {
		p.words[i] = r.Uint64(usageOff + uint64(i)*8)
	}
	return p, nil
}

// View returns the peer arena's bytes [off, off+n), checked against the
// reservation, the peer's published committed size and the file size.
func (p *PeerArena) View(off, n uint64) ([]byte, error) {
	return view(p.r, p.base, p.max, atomic.LoadUint64(p.words[0]), off, n)
}

// Usage returns the figures the peer published.
func (p *PeerArena) Usage() Usage {
	return Usage{
		Committed: atomic.LoadUint64(p.words[0]),
		InUse:     atomic.LoadUint64(p.words[1]),
		HighWater: atomic.LoadUint64(p.words[2]),
		Max:       p.max,
	}
}

func view(r *Region, base, max, committed, off, n uint64) ([]byte, error) {
	end := off + n
	if end < off || end > max {
		return nil, fmt.Errorf("shmpool: view [%d, +%d) past the arena maximum of %s: %w", off, n, FormatBytes(max), ErrOutOfBounds)
	}
	if end > committed {
		return nil, fmt.Errorf("shmpool: view [%d, +%d) past the arena's %s committed: %w", off, n, FormatBytes(committed), ErrOutOfBounds)
	}
	return r.Slice(base+off, n)
}

func roundUp(n, to uint64) uint64 { return (n + to - 1) / to * to }
