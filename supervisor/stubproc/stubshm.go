package stubproc

import (
	"maps"
	"os"
	"slices"
	"sync"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/modelconfig"
	"github.com/stubvisor/stubvisor/ipc"
	"github.com/stubvisor/stubvisor/supervisor/clientshm"
)

// stubShm is the per-stub side: the lifeline socket that carries region
// fds, and which regions the stub has mapped.
type stubShm struct {
	mu     sync.Mutex
	life   *os.File // supervisor end of the lifeline; nil once closed
	mapped map[uint64]*clientshm.Region
}

// Unmap tells the stub to drop its mapping of r (clientshm.Mapper: the
// region was unregistered and no request uses it).
func (p *Proc) Unmap(r *clientshm.Region) { p.shm.unmap(p, r) }

// ensureMapped makes sure the stub has mapped r before any message that
// names it: the fd goes over the lifeline first, then MapRegion on the
// ring, so the stub finds the fd queued when it reads MapRegion.
//
// A CUDA region sends no fd: MapRegion carries its IPC handle and device,
// and the stub opens the handle itself. Only the Python stub speaks CUDA.
func (ss *stubShm) ensureMapped(p *Proc, r *clientshm.Region) error {
	handle, device, isCUDA := r.CUDA()
	if r.FD() == nil && !isCUDA {
		return backendapi.Errorf(backendapi.Unsupported, "shared memory region '%s' cannot be used by a stub process", r.Name())
	}
	if isCUDA && p.cfg.Kind != modelconfig.KindPython {
		return backendapi.Errorf(backendapi.Unsupported, "CUDA shared memory region '%s' cannot be used by model '%s': only Python models read CUDA memory", r.Name(), p.cfg.Model)
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if _, ok := ss.mapped[r.ID()]; ok {
		return nil
	}
	if ss.life == nil {
		return p.failure()
	}
	offset, size := r.Window()
	msg := &ipc.MapRegionMsg{RegionID: r.ID(), Offset: offset, Size: size}
	if isCUDA {
		msg.CUDAHandle, msg.DeviceID = handle, device
	} else if err := sendFD(ss.life, r.FD(), r.ID()); err != nil {
		return backendapi.Errorf(backendapi.Internal, "failed to hand shared memory region '%s' to stub '%s': %v", r.Name(), p.cfg.Instance, err)
	}
	if err := p.conn.Send(msg); err != nil {
		return p.deathError(err)
	}
	if ss.mapped == nil {
		ss.mapped = map[uint64]*clientshm.Region{}
	}
	ss.mapped[r.ID()] = r
	p.cfg.Regions.AddMapper(r, p)
	return nil
}

// unmap tells the stub to drop its mapping of r.
func (ss *stubShm) unmap(p *Proc, r *clientshm.Region) {
	ss.mu.Lock()
	_, ok := ss.mapped[r.ID()]
	delete(ss.mapped, r.ID())
	ss.mu.Unlock()
	if !ok || !p.Alive() {
		return
	}
	if err := p.conn.Send(&ipc.UnmapRegionMsg{RegionID: r.ID()}); err != nil && p.Alive() {
		p.log.Warn("unmap client shared memory", "region", r.Name(), "error", err)
	}
}

// closeLifeline closes the supervisor's end of the lifeline once the
// process is gone, and forgets what it had mapped.
func (ss *stubShm) closeLifeline(p *Proc) {
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
	p.cfg.Regions.ForgetMapper(p, slices.Collect(maps.Values(mapped)))
}

// clientTensors turns inputs in client regions into LocClient (system) or
// LocCUDA descriptors and output requests into targets. It returns the regions it acquired
// (released when the request ends) or an error with nothing held.
func (p *Proc) clientTensors(pr *Request, r *ipc.Request) (held []*clientshm.Region, err error) {
	regions := p.cfg.Regions
	defer func() {
		if err != nil {
			regions.Release(held)
			held = nil
		}
	}()
	use := func(ref *backendapi.SharedMemoryRef) (*clientshm.Region, error) {
		reg, err := regions.Acquire(ref)
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
				in.Name, p.cfg.Model, want, in.SharedMemory.ByteSize)
		}
		loc := uint8(ipc.LocClient)
		if _, _, isCUDA := reg.CUDA(); isCUDA {
			loc = ipc.LocCUDA
		}
		r.Inputs[i] = ipc.Tensor{Name: in.Name, DataType: uint8(in.DataType), Shape: slices.Clone(in.Shape), Loc: loc,
			Offset: in.SharedMemory.Offset, Size: in.SharedMemory.ByteSize, RegionID: reg.ID()}
	}
	for _, o := range pr.req.Outputs {
		if o.SharedMemory == nil {
			continue
		}
		reg, err := use(o.SharedMemory)
		if err != nil {
			return held, err
		}
		r.OutputTargets = append(r.OutputTargets, ipc.OutputTarget{Name: o.Name, RegionID: reg.ID(), Offset: o.SharedMemory.Offset, Size: o.SharedMemory.ByteSize})
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
