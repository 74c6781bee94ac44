package shmpool

import (
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stubvisor/stubvisor/shmpool/shmtest"
)

const (
	kib = 1 << 10
	mib = 1 << 20
)

// newRegion creates a region of reserve bytes whose first page holds the
// usage words of two arenas (at 0 and 64).
func newRegion(t *testing.T, reserve uint64) *Region {
	t.Helper()
	r, err := Create(t.Name(), reserve)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	})
	if err := r.Grow(0, PageSize); err != nil {
		t.Fatal(err)
	}
	return r
}

func newArena(t *testing.T, s Settings) (*Region, *Arena) {
	t.Helper()
	r := newRegion(t, PageSize+roundUp(s.MaxBytes, PageSize))
	a, err := NewArena(r, PageSize, s, 0)
	if err != nil {
		t.Fatal(err)
	}
	return r, a
}

// openPeer maps the region a second time, as the other process does.
func openPeer(t *testing.T, r *Region) *Region {
	t.Helper()
	fd, err := unix.FcntlInt(r.File().Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Open(os.NewFile(uintptr(fd), "peer"), r.Size())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestArenaFirstFit(t *testing.T) {
	// An op allocates n bytes and expects offset want, or (free >= 0)
	// frees the block op number free allocated.
	type op struct {
		n, want uint64
		free    int
	}
	a := func(n, want uint64) op { return op{n: n, want: want, free: -1} }
	f := func(i int) op { return op{free: i} }
	cases := []struct {
		name string
		ops  []op
	}{
		{"sizes round up to 64", []op{a(1, 0), a(64, 64), a(65, 128), a(1, 256)}},
		{"zero bytes take one block", []op{a(0, 0), a(0, 64)}},
		{"a freed hole is reused first", []op{a(100, 0), a(100, 128), f(0), a(64, 0), a(64, 64), a(1, 256)}},
		{"a hole too small is skipped", []op{a(64, 0), a(64, 64), f(0), a(128, 128)}},
		{"neighbours coalesce", []op{a(64, 0), a(64, 64), a(64, 128), a(64, 192), f(0), f(2), f(1), a(192, 0)}},
		{"coalesce into the tail", []op{a(64, 0), a(64, 64), f(1), f(0), a(256, 0)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			shmtest.NoLeaks(t)
			_, ar := newArena(t, Settings{DefaultBytes: 64 * kib, GrowthBytes: 64 * kib, MaxBytes: mib})
			offs := make([]uint64, len(tc.ops))
			for i, o := range tc.ops {
				if o.free >= 0 {
					if err := ar.Free(offs[o.free]); err != nil {
						t.Fatalf("op %d: %v", i, err)
					}
					continue
				}
				off, err := ar.Alloc(o.n)
				if err != nil {
					t.Fatalf("op %d: %v", i, err)
				}
				if off != o.want {
					t.Fatalf("op %d: alloc %d at %d, want %d", i, o.n, off, o.want)
				}
				offs[i] = off
			}
		})
	}
}

func TestArenaGrowth(t *testing.T) {
	cases := []struct {
		name          string
		s             Settings
		allocs        []uint64
		wantCommitted []uint64 // after each alloc
	}{
		{"by the growth step", Settings{DefaultBytes: 64 * kib, GrowthBytes: 64 * kib, MaxBytes: mib},
			[]uint64{60 * kib, 8 * kib, 61 * kib}, []uint64{64 * kib, 128 * kib, 192 * kib}},
		{"by more when one block needs it", Settings{DefaultBytes: 64 * kib, GrowthBytes: 64 * kib, MaxBytes: mib},
			[]uint64{300 * kib}, []uint64{300 * kib}},
		{"capped at the maximum", Settings{DefaultBytes: 0, GrowthBytes: 768 * kib, MaxBytes: mib},
			[]uint64{1, 1000 * kib}, []uint64{768 * kib, mib}},
		{"no default", Settings{GrowthBytes: 4 * kib, MaxBytes: mib},
			[]uint64{100}, []uint64{4 * kib}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			shmtest.NoLeaks(t)
			r, a := newArena(t, tc.s)
			for i, n := range tc.allocs {
				if _, err := a.Alloc(n); err != nil {
					t.Fatal(err)
				}
				u := a.Usage()
				if u.Committed != tc.wantCommitted[i] {
					t.Fatalf("after alloc %d: committed %d, want %d", i, u.Committed, tc.wantCommitted[i])
				}
				fs, err := r.FileSize()
				if err != nil {
					t.Fatal(err)
				}
				if fs != PageSize+u.Committed {
					t.Fatalf("file is %d bytes, want the arena start plus %d committed", fs, u.Committed)
				}
			}
		})
	}
}

func TestArenaExhausted(t *testing.T) {
	shmtest.NoLeaks(t)
	_, a := newArena(t, Settings{DefaultBytes: mib, GrowthBytes: mib, MaxBytes: 64 * mib})
	_, err := a.Alloc(80 * mib)
	want := "shmpool: allocate 80 MiB: pool maximum of 64 MiB reached, 0 bytes in use (raise --shm-max-byte-size): pool exhausted"
	if !errors.Is(err, ErrPoolExhausted) || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	// Full after fragmentation: 64 MiB in use leaves no room for a byte.
	if _, err := a.Alloc(64 * mib); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Alloc(1); !errors.Is(err, ErrPoolExhausted) || !strings.Contains(err.Error(), "64 MiB in use") {
		t.Fatalf("alloc in a full arena: %v", err)
	}
	if _, err := a.Alloc(1<<64 - 1); !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("alloc of 2^64-1 bytes: %v", err)
	}
}

func TestArenaFreeUnknown(t *testing.T) {
	shmtest.NoLeaks(t)
	_, a := newArena(t, Settings{DefaultBytes: 64 * kib, GrowthBytes: 64 * kib, MaxBytes: mib})
	off, err := a.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []uint64{off + 64, 1 << 40} {
		if err := a.Free(bad); !errors.Is(err, ErrUnknownBlock) {
			t.Fatalf("free(%d): %v", bad, err)
		}
	}
	if err := a.Free(off); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(off); !errors.Is(err, ErrUnknownBlock) {
		t.Fatalf("double free: %v", err)
	}
}

// TestArenaRandom runs random allocations and frees against a model: no
// two live blocks overlap, the accounting matches, and once everything is
// freed the arena is one free extent again.
func TestArenaRandom(t *testing.T) {
	shmtest.NoLeaks(t)
	_, a := newArena(t, Settings{DefaultBytes: 64 * kib, GrowthBytes: 64 * kib, MaxBytes: 16 * mib})
	rng := rand.New(rand.NewPCG(1, 2))
	live := map[uint64]uint64{}
	var inUse, high uint64
	for i := 0; i < 20000; i++ {
		if len(live) > 0 && rng.IntN(2) == 0 {
			for off, size := range live {
				if err := a.Free(off); err != nil {
					t.Fatal(err)
				}
				delete(live, off)
				inUse -= size
				break
			}
			continue
		}
		n := uint64(rng.IntN(64 * kib))
		off, err := a.Alloc(n)
		if errors.Is(err, ErrPoolExhausted) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		size := roundUp(max(n, 1), BlockAlign)
		for o, s := range live {
			if off < o+s && o < off+size {
				t.Fatalf("block [%d,+%d) overlaps [%d,+%d)", off, size, o, s)
			}
		}
		if off%BlockAlign != 0 || off+size > a.Usage().Committed {
			t.Fatalf("block [%d,+%d) misaligned or past committed %d", off, size, a.Usage().Committed)
		}
		live[off] = size
		inUse += size
		high = max(high, inUse)
	}
	if u := a.Usage(); u.InUse != inUse || u.HighWater != high {
		t.Fatalf("usage %+v, model in use %d high %d", u, inUse, high)
	}
	for off := range live {
		if err := a.Free(off); err != nil {
			t.Fatal(err)
		}
	}
	if len(a.free) != 1 || a.free[0] != (extent{0, 16 * mib}) {
		t.Fatalf("free list after freeing everything: %v", a.free)
	}
}

func TestArenaConcurrent(t *testing.T) {
	shmtest.NoLeaks(t)
	_, a := newArena(t, Settings{DefaultBytes: 64 * kib, GrowthBytes: 64 * kib, MaxBytes: 64 * mib})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				off, err := a.Alloc(uint64(64 * (1 + (i+g)%50)))
				if err == nil {
					b, verr := a.View(off, 64)
					if verr == nil {
						b[0] = byte(g)
					}
					err = errors.Join(verr, a.Free(off))
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if u := a.Usage(); u.InUse != 0 || a.Blocks() != 0 {
		t.Fatalf("after concurrent alloc/free: %+v, %d blocks", u, a.Blocks())
	}
}

func TestPeerArena(t *testing.T) {
	shmtest.NoLeaks(t)
	r, a := newArena(t, Settings{DefaultBytes: 64 * kib, GrowthBytes: 64 * kib, MaxBytes: mib})
	peerRegion := openPeer(t, r)
	p, err := NewPeerArena(peerRegion, PageSize, mib, 0)
	if err != nil {
		t.Fatal(err)
	}
	off, err := a.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	own, _ := a.View(off, 100)
	copy(own, "shared bytes")
	if u := p.Usage(); u != a.Usage() {
		t.Fatalf("peer reads usage %+v, owner has %+v", u, a.Usage())
	}
	got, err := p.View(off, 12)
	if err != nil || string(got) != "shared bytes" {
		t.Fatalf("peer view: %q, %v", got, err)
	}
	// A block past the committed size is refused until the owner grows,
	// then visible through the same mapping.
	if _, err := p.View(64*kib, 64); !errors.Is(err, ErrOutOfBounds) {
		t.Fatalf("view past committed: %v", err)
	}
	big, err := a.Alloc(100 * kib)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.View(big, 100*kib); err != nil {
		t.Fatalf("view after growth: %v", err)
	}
	if string(got) != "shared bytes" {
		t.Fatal("an old view changed when the arena grew")
	}
	cases := []struct {
		name      string
		off, size uint64
	}{
		{"past the maximum", mib - 32, 64},
		{"overflowing", 1<<64 - 16, 32},
		{"far past committed", 512 * kib, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := p.View(tc.off, tc.size); !errors.Is(err, ErrOutOfBounds) {
				t.Fatalf("got %v, want ErrOutOfBounds", err)
			}
		})
	}
}

// TestPeerLiesAboutCommitted: a peer that publishes a committed size its
// file does not have gets refused by the file-size check, not a SIGBUS.
func TestPeerLiesAboutCommitted(t *testing.T) {
	shmtest.NoLeaks(t)
	r, _ := newArena(t, Settings{DefaultBytes: 64 * kib, GrowthBytes: 64 * kib, MaxBytes: mib})
	p, err := NewPeerArena(r, PageSize, mib, 0)
	if err != nil {
		t.Fatal(err)
	}
	*r.Uint64(0) = mib // committed word, claimed without growing the file
	if _, err := p.View(512*kib, 64); !errors.Is(err, ErrOutOfBounds) {
		t.Fatalf("view of unbacked bytes: %v", err)
	}
}

func TestRegionSealedAndAnonymous(t *testing.T) {
	shmtest.NoLeaks(t)
	r := newRegion(t, 16*PageSize)
	if err := r.Grow(0, 8*PageSize); err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(int(r.File().Fd()), PageSize); !errors.Is(err, unix.EPERM) {
		t.Fatalf("shrinking the region: %v, want EPERM", err)
	}
	// Growing below the current size never shrinks the file.
	if err := r.Grow(0, PageSize); err != nil {
		t.Fatal(err)
	}
	if fs, _ := r.FileSize(); fs != 8*PageSize {
		t.Fatalf("file is %d bytes after a smaller grow", fs)
	}
	link, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(r.File().Fd())))
	if err != nil || !strings.HasPrefix(link, "/memfd:") {
		t.Fatalf("region fd is %q, %v; want a memfd", link, err)
	}
	if _, err := r.Slice(8*PageSize-1, 2); !errors.Is(err, ErrOutOfBounds) {
		t.Fatalf("slice past the file: %v", err)
	}
	if _, err := r.Slice(16*PageSize, 1); !errors.Is(err, ErrOutOfBounds) {
		t.Fatalf("slice past the reservation: %v", err)
	}
	if err := r.Grow(15*PageSize, 2*PageSize); !errors.Is(err, ErrOutOfBounds) {
		t.Fatalf("grow past the reservation: %v", err)
	}
}

func TestOpenRejectsUnsealed(t *testing.T) {
	shmtest.NoLeaks(t)
	fd, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(os.NewFile(uintptr(fd), "unsealed"), PageSize); err == nil {
		t.Fatal("opened a memfd that can shrink")
	}
}

func TestSettingsNormalize(t *testing.T) {
	cases := []struct {
		name string
		in   Settings
		want Settings
		err  bool
	}{
		{"pages", Settings{1, 1, 1}, Settings{PageSize, PageSize, PageSize}, false},
		{"default capped", Settings{2 * mib, mib, mib}, Settings{mib, mib, mib}, false},
		{"zero growth", Settings{mib, 0, 2 * mib}, Settings{mib, PageSize, 2 * mib}, false},
		{"zero maximum", Settings{mib, mib, 0}, Settings{}, true},
		{"absurd", Settings{0, 0, 1 << 60}, Settings{}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.in.Normalize()
			if (err != nil) != tc.err || (!tc.err && got != tc.want) {
				t.Fatalf("got %+v, %v; want %+v (error %v)", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestFormatBytes(t *testing.T) {
	cases := map[uint64]string{0: "0 bytes", 100: "100 bytes", 4096: "4 KiB", 64 * mib: "64 MiB", 1 << 30: "1 GiB", mib + 512*kib: "1.5 MiB", 4097: "4097 bytes"}
	for n, want := range cases {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
