package supervisor

import (
	"os"
	"slices"
	"sync"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/modelconfig"
	"github.com/stubvisor/stubvisor/ipc"
)

// stubShm is the per-stub side: the lifeline socket that carries region
// fds, and which regions the stub has mapped.
type stubShm struct {
	mu     sync.Mutex
	life   *os.File // supervisor end of the lifeline; nil once closed
	mapped map[uint64]*shmRegion
}

// ensureMapped makes sure the stub has mapped r before any message that
// names it: the fd goes over the lifeline first, then MapRegion on the
// ring, so the stub finds the fd queued when it reads MapRegion.
//
// A CUDA region sends no fd: MapRegion carries its IPC handle and device,
// and the stub opens the handle itself. Only the Python stub speaks CUDA.
func (ss *stubShm) ensureMapped(p *stubProc, r *shmRegion) error {
	if r.fd == nil && r.cuda == nil {
		return backendapi.Errorf(backendapi.Unsupported, "shared memory region '%s' cannot be used by a stub process", r.name)
	}
	if r.cuda != nil && p.inst.mv.kind != modelconfig.KindPython {
		return backendapi.Errorf(backendapi.Unsupported, "CUDA shared memory region '%s' cannot be used by model '%s': only Python models read CUDA memory", r.name, p.inst.mv.name)
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if _, ok := ss.mapped[r.id]; ok {
		return nil
	}
	if ss.life == nil {
		return p.failure()
	}
	msg := &ipc.MapRegionMsg{RegionID: r.id, Offset: r.offset, Size: r.size}
	if r.cuda != nil {
		msg.CUDAHandle, msg.DeviceID = r.cuda.handle, r.cuda.device
	} else if err := sendFD(ss.life, r.fd, r.id); err != nil {
		return backendapi.Errorf(backendapi.Internal, "failed to hand shared memory region '%s' to stub '%s': %v", r.name, p.inst.name, err)
	}
	if err := p.conn.Send(msg); err != nil {
		return p.deathError(err)
	}
	if ss.mapped == nil {
		ss.mapped = map[uint64]*shmRegion{}
	}
	ss.mapped[r.id] = r
	p.env.regions.mu.Lock()
	if r.stubs != nil {
		r.stubs[p] = struct{}{}
	}
	p.env.regions.mu.Unlock()
	return nil
}

// unmap tells the stub to drop its mapping of r.
func (ss *stubShm) unmap(p *stubProc, r *shmRegion) {
	ss.mu.Lock()
	_, ok := ss.mapped[r.id]
	delete(ss.mapped, r.id)
	ss.mu.Unlock()
	if !ok || !p.alive() {
		return
	}
	if err := p.conn.Send(&ipc.UnmapRegionMsg{RegionID: r.id}); err != nil && p.alive() {
		p.log.Warn("unmap client shared memory", "region", r.name, "error", err)
	}
}

// closeLifeline closes the supervisor's end of the lifeline once the
// process is gone, and forgets what it had mapped.
func (ss *stubShm) closeLifeline(p *stubProc) {
	ss.mu.Lock()
	life, mapped := ss.life, ss.mapped
	ss.life, ss.mapped = nil, nil
	ss.mu.Unlock()
	if life != nil {
		_ = life.Close()
	}
	if len(mapped) == 0 {
		return
	}
	c := p.env.regions
	c.mu.Lock()
	for _, r := range mapped {
		delete(r.stubs, p)
	}
	c.mu.Unlock()
}

// clientTensors turns inputs in client regions into LocClient (system) or
// LocCUDA descriptors and output requests into targets. It returns the regions it acquired
// (released when the request ends) or an error with nothing held.
func (p *stubProc) clientTensors(pr *pending, r *ipc.Request) (held []*shmRegion, err error) {
	regions := p.env.regions
	defer func() {
		if err != nil {
			regions.release(held)
			held = nil
		}
	}()
	use := func(ref *backendapi.SharedMemoryRef) (*shmRegion, error) {
		reg, err := regions.acquire(ref)
		if err != nil {
			return nil, err
		}
		held = append(held, reg)
		return reg, p.shm.ensureMapped(p, reg)
	}
	for i := range pr.req.Inputs {
		in := &pr.req.Inputs[i]
		if in.SharedMemory == nil {
			continue
		}
		reg, err := use(in.SharedMemory)
		if err != nil {
			return held, err
		}
		if want, ok := tensorBytes(in.DataType, in.Shape); ok && want != in.SharedMemory.ByteSize {
			return held, backendapi.Errorf(backendapi.InvalidArg, "input byte size mismatch for input '%s' for model '%s'. Expected %d, got %d",
				in.Name, p.inst.mv.name, want, in.SharedMemory.ByteSize)
		}
		loc := uint8(ipc.LocClient)
		if reg.cuda != nil {
			loc = ipc.LocCUDA
		}
		r.Inputs[i] = ipc.Tensor{Name: in.Name, DataType: uint8(in.DataType), Shape: slices.Clone(in.Shape), Loc: loc,
			Offset: in.SharedMemory.Offset, Size: in.SharedMemory.ByteSize, RegionID: reg.id}
	}
	for _, o := range pr.req.Outputs {
		if o.SharedMemory == nil {
			continue
		}
		reg, err := use(o.SharedMemory)
		if err != nil {
			return held, err
		}
		r.OutputTargets = append(r.OutputTargets, ipc.OutputTarget{Name: o.Name, RegionID: reg.id, Offset: o.SharedMemory.Offset, Size: o.SharedMemory.ByteSize})
	}
	return held, nil
}

// tensorBytes is the byte size of a fixed-size tensor; ok is false for
// BYTES (whose size the data decides) or a shape with a negative dim.
func tensorBytes(dt backendapi.DataType, shape []int64) (uint64, bool) {
	size := dt.Size()
	if size <= 0 {
		return 0, false
	}
	n := uint64(size)
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
		n *= uint64(d)
	}
	return n, true
}
