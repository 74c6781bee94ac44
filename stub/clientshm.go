package stub

import (
	"errors"
	"fmt"
	"sync"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc"
)

// Client shared memory. A client that registered a system shared-memory
// region with the server can place inputs in it and ask for outputs in it;
// those bytes never pass through the supervisor or the stub's arena. The
// first time a request uses a region, the supervisor sends the region's fd
// over the lifeline socket (fd 4, SCM_RIGHTS, the region id as payload)
// and then MapRegion on the ring; ring order guarantees the fd is already
// queued when MapRegion is read. The stub maps the registered part
// read-write and keeps it by region id until UnmapRegion, which the
// supervisor sends only once no request uses the region any more.
//
// Inputs with loc LocClient are views of the mapping (zero copy), exactly
// like arena inputs. An output the client asked for in a region is handed
// to the model by ModelRequest.Output as a view of the region itself, so
// the model writes the result where the client reads it; an output the
// model returns in ordinary Go memory is copied there once. Either way the
// response names it with a LocClient descriptor and carries no bytes.

// Errors of client shared memory, wrapped with the region and range.
var (
	// ErrRegionNotMapped is reported for a tensor naming a region this
	// stub has not mapped.
	ErrRegionNotMapped = errors.New("client shared memory region is not mapped in this stub")
	// ErrRegionBounds is reported for a range outside the mapped region.
	ErrRegionBounds = errors.New("range outside the client shared memory region")
	// ErrNoLifeline is reported when MapRegion arrives but the stub has
	// no lifeline socket to take the fd from.
	ErrNoLifeline = errors.New("no lifeline socket on fd 4")
)

// regions are the client regions mapped in this stub, by region id. The
// main goroutine, a pumping model goroutine and response senders use it
// at once, hence the lock; a view handed out stays valid until the
// region's UnmapRegion, which the supervisor sends only after every
// request using it ended.
type regions struct {
	life int // lifeline fd, -1 when the stub has none

	mu   sync.RWMutex
	byID map[uint64]*region
}

// region is one mapping: mem is what mmap returned (page aligned, nil for
// an empty region), data the registered part of it.
type region struct {
	mem  []byte
	data []byte
}

func newRegions(life int) *regions {
	return &regions{life: life, byID: map[uint64]*region{}}
}

// mapRegion handles MapRegion: it takes the fd queued on the lifeline,
// checks it is the announced region, maps [offset, offset+size) of it and
// closes the fd. A lifeline that carried another region breaks the
// pairing for good and is reported as ipc.ErrProtocol.
func (rs *regions) mapRegion(m *ipc.MapRegionMsg) error {
	if rs.life < 0 {
		return fmt.Errorf("map region %d: %w", m.RegionID, ErrNoLifeline)
	}
	fd, err := recvRegionFD(rs.life, m.RegionID)
	if err != nil {
		return fmt.Errorf("map region %d: %w", m.RegionID, err)
	}
	mem, data, err := mmapRegion(fd, m.Offset, m.Size)
	closeFD(fd)
	if err != nil {
		return fmt.Errorf("map region %d (%d bytes at %d): %w", m.RegionID, m.Size, m.Offset, err)
	}
	rs.mu.Lock()
	old := rs.byID[m.RegionID]
	rs.byID[m.RegionID] = &region{mem: mem, data: data}
	rs.mu.Unlock()
	if old != nil {
		munmapRegion(old.mem)
	}
	return nil
}

// unmap handles UnmapRegion; an unknown id is ignored.
func (rs *regions) unmap(id uint64) {
	rs.mu.Lock()
	r := rs.byID[id]
	delete(rs.byID, id)
	rs.mu.Unlock()
	if r != nil {
		munmapRegion(r.mem)
	}
}

// closeAll unmaps every region (the stub is exiting).
func (rs *regions) closeAll() {
	rs.mu.Lock()
	all := rs.byID
	rs.byID = map[uint64]*region{}
	rs.mu.Unlock()
	for _, r := range all {
		munmapRegion(r.mem)
	}
}

// view returns size bytes at offset in region id, after checking the
// range against the mapping (offset and size come from the peer).
func (rs *regions) view(id, offset, size uint64) ([]byte, error) {
	rs.mu.RLock()
	r := rs.byID[id]
	rs.mu.RUnlock()
	if r == nil {
		return nil, fmt.Errorf("region %d: %w", id, ErrRegionNotMapped)
	}
	n := uint64(len(r.data))
	if offset > n || size > n-offset {
		return nil, fmt.Errorf("region %d: [%d, +%d) in %d bytes: %w", id, offset, size, n, ErrRegionBounds)
	}
	return r.data[offset : offset+size : offset+size], nil
}

// errShmTarget is the error for an output that does not fit the place the
// client gave it, in the supervisor's and the Python stub's words.
func errShmTarget(name string, have, need uint64) error {
	return backendapi.Errorf(backendapi.Internal, "shared memory size specified with the request for output '%s' (%d bytes) should be at least %d bytes to hold the results", name, have, need)
}

// target returns the view of the client region where output name of n
// bytes goes, and its wire descriptor (as the Python stub sends it: the
// target's offset, the output's size, the region id). An output larger
// than the place the client gave it is an error, never a short write.
func (h *host) target(tg ipc.OutputTarget, name string, dt uint8, shape []int64, n int) ([]byte, ipc.Tensor, error) {
	if uint64(n) > tg.Size {
		return nil, ipc.Tensor{}, errShmTarget(name, tg.Size, uint64(n))
	}
	buf, err := h.shm.view(tg.RegionID, tg.Offset, uint64(n))
	if err != nil {
		return nil, ipc.Tensor{}, backendapi.Errorf(backendapi.Internal, "output '%s' in client shared memory: %v", name, err)
	}
	return buf, ipc.Tensor{Name: name, DataType: dt, Shape: shape, Loc: ipc.LocClient, Offset: tg.Offset, Size: uint64(n), RegionID: tg.RegionID}, nil
}
