package ipc

import (
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/shmpool"
	"golang.org/x/sys/unix"
)

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
