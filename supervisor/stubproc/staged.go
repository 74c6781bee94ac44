package stubproc

import (
	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/shmpool"
)

// stagedBlock is where an InputBuffer from StageInputs lies: a block of
// the supervisor's arena in this stub's region.
type stagedBlock struct {
	p   *Proc
	off uint64
}

// StageInputs lends a front end a block of n bytes of the supervisor's
// arena to read a request's inputs into (backendapi.InputBuffers). When
// the request runs on this stub, prepare sends those inputs in place
// instead of copying them; elsewhere they are copied as any others. The
// block holds the region mapped until it is freed. It returns nil when the
// stub is gone or the arena has no room.
func (p *Proc) StageInputs(n int) *backendapi.InputBuffer {
	if n <= 0 || !p.Alive() {
		return nil
	}
	p.mu.Lock()
	if p.unmapped {
		p.mu.Unlock()
		return nil
	}
	p.refs++
	p.mu.Unlock()
	off, buf, err := p.conn.Alloc(uint64(n))
	if err != nil {
		p.dropRef()
		return nil
	}
	return backendapi.NewInputBuffer(buf, &stagedBlock{p: p, off: off}, func() {
		if err := p.conn.Free(off); err != nil && p.Alive() {
			p.log.Warn("free staged input block", "offset", off, "error", err)
		}
		p.dropRef()
	})
}

// dropRef ends a hold on the region taken with p.refs++.
func (p *Proc) dropRef() {
	p.mu.Lock()
	p.refs--
	p.mu.Unlock()
	p.maybeUnmap()
}

// stagedInput returns the arena offset of data when it lies in a block
// this stub lent for the request (StageInputs), at a block-aligned place,
// holding the block for the request until unholdStaged.
func (p *Proc) stagedInput(pr *Request, data []byte) (uint64, bool) {
	ib := pr.req.InputBuffer
	if ib == nil {
		return 0, false
	}
	sb, ok := ib.Owner.(*stagedBlock)
	if !ok || sb.p != p {
		return 0, false
	}
	at := ib.Offset(data)
	if at < 0 || at%shmpool.BlockAlign != 0 {
		return 0, false
	}
	if pr.staged != ib {
		if !ib.Hold() {
			return 0, false
		}
		p.unholdStaged(pr) // a block of an earlier run, if any
		pr.staged = ib
	}
	return sb.off + uint64(at), true
}

// freeRequestInputs frees a request's input blocks and ends its hold on a
// lent block (stagedInput).
func (p *Proc) freeRequestInputs(pr *Request) {
	p.freeOwn(pr.inputs)
	p.unholdStaged(pr)
}

// unholdStaged ends the request's hold on the lent block its inputs were
// sent in, once the stub no longer reads them.
func (p *Proc) unholdStaged(pr *Request) {
	p.mu.Lock()
	ib := pr.staged
	pr.staged = nil
	p.mu.Unlock()
	if ib != nil {
		ib.Unhold()
	}
}

// stagedHolds reports whether [off, off+size) lies in the request's lent
// block (an output that is an input returned unchanged).
func (p *Proc) stagedHolds(pr *Request, off, size uint64) bool {
	ib := pr.staged
	if ib == nil {
		return false
	}
	sb := ib.Owner.(*stagedBlock)
	end := off + size
	return off >= sb.off && end > off && end <= sb.off+uint64(len(ib.Data))
}
