package stub

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
	"github.com/stubvisor/stubvisor/ipc/ipctest/fakesup"
	"github.com/stubvisor/stubvisor/shmpool/shmtest"
)

// clientMem is a client's shared-memory object as the test holds it: a
// memfd (nothing in /dev/shm to leak), mapped in the test.
type clientMem struct {
	name string
	fd   int
	mem  []byte
}

func newClientMem(t *testing.T, name string, size int) *clientMem {
	t.Helper()
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return &clientMem{name: name, fd: fd, mem: ipctest.MapShared(t, fd, size)}
}

// shmPeer is a stub started with a lifeline.
type shmPeer struct{ *peer }

func startShmStub(t *testing.T, role string) *shmPeer {
	t.Helper()
	return &shmPeer{startGoStub(t, role, true)}
}

// mapRegion hands the stub [offset, offset+size) of c as region id.
func (p *shmPeer) mapRegion(c *clientMem, id, offset, size uint64) {
	p.T.Helper()
	p.SendFD(c.fd, id)
	p.Send(&ipc.MapRegionMsg{RegionID: id, Offset: offset, Size: size})
}

// maps reports whether the stub maps the memfd name now (after a round
// trip, so every message sent before is handled).
func (p *shmPeer) maps(name string) bool {
	p.T.Helper()
	p.IsReady()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", p.Cmd.Process.Pid))
	if err != nil {
		p.T.Fatal(err)
	}
	return strings.Contains(string(b), "/memfd:"+name+" ")
}

func clientIn(name string, region, off uint64, n int) ipc.Tensor {
	return ipc.Tensor{Name: name, DataType: uint8(backendapi.TypeInt32), Shape: []int64{int64(n)}, Loc: ipc.LocClient, Offset: off, Size: uint64(4 * n), RegionID: region}
}

func TestClientSharedMemory(t *testing.T) {
	shmtest.NoLeaks(t)
	const (
		base = 5000 // the registered part starts off a page boundary
		size = 8192
		id   = 1
	)
	c := newClientMem(t, "stub-test-client", 1<<16)
	reg := c.mem[base : base+size]
	p := startShmStub(t, "echo")
	p.initialize(false)
	if p.maps(c.name) {
		t.Fatal("region mapped before MapRegion")
	}
	p.mapRegion(c, id, base, size)
	if !p.maps(c.name) {
		t.Fatal("region not mapped after MapRegion")
	}
	copy(reg[100:], ipctest.INT32(1, 2, 3, 4))

	t.Run("inputs and outputs in the region", func(t *testing.T) {
		p.T = t
		clear(reg[200:400])
		p.Send(&ipc.ExecuteMsg{BatchID: 1, Requests: []ipc.Request{{Handle: 3, Inputs: []ipc.Tensor{clientIn("IN0", id, 100, 4)},
			OutputTargets: []ipc.OutputTarget{{Name: "OUT0", RegionID: id, Offset: 200, Size: 32}, {Name: "MODEL", RegionID: id, Offset: 300, Size: 5}}}}})
		done, ok := p.Recv().(*ipc.ExecuteDoneMsg)
		if !ok || done.Error != nil || len(done.Responses) != 1 || done.Responses[0].Error != nil {
			t.Fatalf("ExecuteDone = %+v", done)
		}
		resp := done.Responses[0]
		want := map[string]ipc.Tensor{
			// Python's descriptor: the target's offset, the output's size.
			"OUT0":  {Name: "OUT0", DataType: uint8(backendapi.TypeInt32), Shape: []int64{4}, Loc: ipc.LocClient, Offset: 200, Size: 16, RegionID: id},
			"MODEL": {Name: "MODEL", DataType: uint8(backendapi.TypeBytes), Shape: []int64{1}, Loc: ipc.LocClient, Offset: 300, Size: 5, RegionID: id},
		}
		for _, o := range resp.Outputs {
			if o.Name == "OUT1" {
				if o.Loc != ipc.LocArena1 || fmt.Sprint(ipctest.INT32s(p.Read(o))) != "[1 2 3 4]" {
					t.Errorf("OUT1 (not in shared memory) = %+v", o)
				}
				continue
			}
			if w, ok := want[o.Name]; !ok || fmt.Sprint(o) != fmt.Sprint(w) {
				t.Errorf("output %+v, want %+v", o, w)
			}
			delete(want, o.Name)
		}
		if len(want) != 0 {
			t.Errorf("missing outputs %v", want)
		}
		if got := string(reg[200:216]); got != string(ipctest.INT32(1, 2, 3, 4)) {
			t.Errorf("OUT0 in the region = %x", got)
		}
		if got := reg[300:305]; string(got) != string(ipctest.BYTES("m")) {
			t.Errorf("MODEL in the region = %q", got)
		}
		if reg[216] != 0 || reg[305] != 0 {
			t.Error("the stub wrote past an output")
		}
		p.Release(resp)
		p.StubInUse(0)
	})

	tests := []struct {
		name      string
		in        ipc.Tensor
		targets   []ipc.OutputTarget
		role      string
		batchErr  string // ExecuteDone fails the batch with this
		respErr   string // the response is this error
		wantClean []int  // region bytes that must stay zero
	}{
		{name: "output too small", in: clientIn("IN0", id, 100, 4), targets: []ipc.OutputTarget{{Name: "OUT0", RegionID: id, Offset: 200, Size: 8}},
			respErr: "shared memory size specified with the request for output 'OUT0' (8 bytes) should be at least 16 bytes to hold the results", wantClean: []int{200}},
		{name: "Go memory output too small", in: clientIn("IN0", id, 100, 4), targets: []ipc.OutputTarget{{Name: "MODEL", RegionID: id, Offset: 300, Size: 4}},
			respErr: "shared memory size specified with the request for output 'MODEL' (4 bytes) should be at least 5 bytes to hold the results", wantClean: []int{300}},
		{name: "output past the region", in: clientIn("IN0", id, 100, 4), targets: []ipc.OutputTarget{{Name: "OUT0", RegionID: id, Offset: size - 8, Size: 16}},
			respErr: "range outside the client shared memory region"},
		{name: "output offset overflows", in: clientIn("IN0", id, 100, 4), targets: []ipc.OutputTarget{{Name: "OUT0", RegionID: id, Offset: 1<<64 - 8, Size: 16}},
			respErr: "range outside the client shared memory region"},
		{name: "output in an unknown region", in: clientIn("IN0", id, 100, 4), targets: []ipc.OutputTarget{{Name: "OUT0", RegionID: 99, Offset: 0, Size: 16}},
			respErr: "is not mapped in this stub"},
		{name: "input past the region", in: clientIn("IN0", id, size-8, 4), batchErr: "range outside the client shared memory region"},
		{name: "input offset overflows", in: clientIn("IN0", id, 1<<64-4, 4), batchErr: "range outside the client shared memory region"},
		{name: "input in an unknown region", in: clientIn("IN0", 99, 0, 4), batchErr: "is not mapped in this stub"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p.T = t
			clear(reg[200:400])
			batch := uint64(10 + i)
			p.Send(&ipc.ExecuteMsg{BatchID: batch, Requests: []ipc.Request{{Handle: 4, Inputs: []ipc.Tensor{tc.in}, OutputTargets: tc.targets}}})
			done, ok := p.Recv().(*ipc.ExecuteDoneMsg)
			if !ok || done.BatchID != batch {
				t.Fatalf("ExecuteDone = %+v", done)
			}
			if tc.batchErr != "" {
				if done.Error == nil || !strings.Contains(done.Error.Message, tc.batchErr) || len(done.Responses) != 0 {
					t.Fatalf("ExecuteDone = %+v, want a batch error with %q", done, tc.batchErr)
				}
			} else {
				if done.Error != nil || len(done.Responses) != 1 {
					t.Fatalf("ExecuteDone = %+v", done)
				}
				r := done.Responses[0]
				if r.Error == nil || backendapi.Code(r.Error.Code) != backendapi.Internal || !strings.Contains(r.Error.Message, tc.respErr) || len(r.Outputs) != 0 || r.Flags != ipc.FlagFinal {
					t.Fatalf("response = %+v, want an INTERNAL error with %q", r, tc.respErr)
				}
			}
			for _, off := range tc.wantClean {
				if reg[off] != 0 {
					t.Errorf("byte %d of the region written despite the error", off)
				}
			}
			p.StubInUse(0) // arena outputs of the failed response were freed
		})
	}

	t.Run("model ignores the error", func(t *testing.T) {
		s := startShmStub(t, "sloppy")
		s.initialize(false)
		s.mapRegion(c, 7, base, size)
		s.Send(&ipc.ExecuteMsg{BatchID: 1, Requests: []ipc.Request{{Handle: 1, Inputs: []ipc.Tensor{clientIn("IN0", 7, 100, 4)},
			OutputTargets: []ipc.OutputTarget{{Name: "OUT0", RegionID: 7, Offset: 200, Size: 4}}}}})
		done, ok := s.Recv().(*ipc.ExecuteDoneMsg)
		if !ok || done.Error != nil || len(done.Responses) != 1 || done.Responses[0].Error == nil ||
			!strings.Contains(done.Responses[0].Error.Message, "output 'OUT0' (4 bytes) should be at least 16 bytes") {
			t.Fatalf("ExecuteDone = %+v, want the too-small error", done)
		}
		s.Finalize()
	})

	t.Run("unmap", func(t *testing.T) {
		p.T = t
		p.Send(&ipc.UnmapRegionMsg{RegionID: id})
		if p.maps(c.name) {
			t.Fatal("region still mapped after UnmapRegion")
		}
		p.Send(&ipc.UnmapRegionMsg{RegionID: id}) // repeated: ignored
		p.Send(&ipc.ExecuteMsg{BatchID: 99, Requests: []ipc.Request{{Handle: 5, Inputs: []ipc.Tensor{clientIn("IN0", id, 100, 4)}}}})
		if done, ok := p.Recv().(*ipc.ExecuteDoneMsg); !ok || done.Error == nil || !strings.Contains(done.Error.Message, "is not mapped in this stub") {
			t.Fatalf("ExecuteDone after unmap = %+v", done)
		}
	})
	p.T = t
	p.Finalize()
}

// TestClientSharedMemoryZeroCopy shows that a model reads the client's
// memory itself and writes its output into the client's memory: a change
// the client makes while Execute runs is what the model returns, and the
// output takes nothing from the stub's arena.
func TestClientSharedMemoryZeroCopy(t *testing.T) {
	shmtest.NoLeaks(t)
	c := newClientMem(t, "stub-test-alias", 4096)
	p := startShmStub(t, "alias")
	p.initialize(true)
	p.mapRegion(c, 2, 0, 4096)
	copy(c.mem[0:], ipctest.INT32(1, 2, 3))
	p.Send(&ipc.ExecuteMsg{BatchID: 1, Requests: []ipc.Request{{Handle: 8, Inputs: []ipc.Tensor{clientIn("IN0", 2, 0, 3)},
		OutputTargets: []ipc.OutputTarget{{Name: "OUT0", RegionID: 2, Offset: 1024, Size: 12}}}}})
	if first, ok := p.Recv().(*ipc.ResponseMsg); !ok || first.Response.Flags != 0 || first.Response.Error != nil {
		t.Fatalf("first response = %+v", first)
	}
	copy(c.mem[0:], ipctest.INT32(7, 8, 9)) // Execute is running and holds the input
	p.Send(&ipc.CancelMsg{Handle: 8})
	var final *ipc.ResponseMsg
	for final == nil {
		switch m := p.Recv().(type) {
		case *ipc.ResponseMsg:
			final = m
		case *ipc.ExecuteDoneMsg:
			if m.Error != nil {
				t.Fatalf("ExecuteDone = %+v", m)
			}
		}
	}
	r := final.Response
	if r.Flags != ipc.FlagFinal || r.Error != nil || len(r.Outputs) != 1 || r.Outputs[0].Loc != ipc.LocClient || r.Outputs[0].Offset != 1024 || r.Outputs[0].Size != 12 {
		t.Fatalf("final response = %+v", r)
	}
	if got := c.mem[1024:1036]; string(got) != string(ipctest.INT32(7, 8, 9)) {
		t.Fatalf("OUT0 in the region = %x, want the input as changed during Execute", got)
	}
	if _, stubUsage := p.Conn.Usage(); stubUsage.HighWater != 0 {
		t.Fatalf("stub arena high water %d bytes: the output went through the arena", stubUsage.HighWater)
	}
	if done, ok := p.Recv().(*ipc.ExecuteDoneMsg); !ok || done.Error != nil {
		t.Fatalf("ExecuteDone = %+v", done)
	}
	p.Finalize()
}

// TestLifelineErrors: fds that do not pair with MapRegion end the stub
// (any later region could be the wrong one); a stub without a lifeline
// refuses the region but keeps serving.
func TestLifelineErrors(t *testing.T) {
	shmtest.NoLeaks(t)
	c := newClientMem(t, "stub-test-lifeline", 4096)

	t.Run("fd of another region", func(t *testing.T) {
		p := startShmStub(t, "echo")
		p.initialize(false)
		p.SendFD(c.fd, 2)
		p.Send(&ipc.MapRegionMsg{RegionID: 1, Size: 4096})
		if code := p.ExitCode(); code != exitProtocol {
			t.Fatalf("stub exit status %d, want %d\n%s", code, exitProtocol, p.Stderr)
		}
		if !strings.Contains(p.Stderr.String(), "the lifeline carried another region") {
			t.Fatalf("stderr:\n%s", p.Stderr)
		}
	})

	t.Run("no lifeline", func(t *testing.T) {
		p := startStub(t, "echo")
		p.initialize(false)
		p.Send(&ipc.MapRegionMsg{RegionID: 1, Size: 4096})
		var logged string
		for logged == "" {
			m, err := p.Conn.Recv(time.Now().Add(fakesup.WaitBound))
			if err != nil {
				t.Fatalf("recv: %v", err)
			}
			if l, ok := m.(*ipc.LogMsg); ok && l.Level == "ERROR" {
				logged = l.Message
			}
		}
		if !strings.Contains(logged, "no lifeline socket on fd 4") {
			t.Fatalf("log = %q", logged)
		}
		p.Send(&ipc.ExecuteMsg{BatchID: 1, Requests: []ipc.Request{{Handle: 1, Inputs: []ipc.Tensor{clientIn("IN0", 1, 0, 4)}}}})
		if done, ok := p.Recv().(*ipc.ExecuteDoneMsg); !ok || done.Error == nil || !strings.Contains(done.Error.Message, "is not mapped in this stub") {
			t.Fatalf("ExecuteDone = %+v", done)
		}
		p.Finalize()
	})

	t.Run("region past the end of the object", func(t *testing.T) {
		p := startShmStub(t, "echo")
		p.initialize(false)
		p.mapRegion(c, 3, 2048, 4096)
		p.Send(&ipc.ExecuteMsg{BatchID: 1, Requests: []ipc.Request{{Handle: 1, Inputs: []ipc.Tensor{clientIn("IN0", 3, 0, 4)}}}})
		if done, ok := p.Recv().(*ipc.ExecuteDoneMsg); !ok || done.Error == nil || !strings.Contains(done.Error.Message, "is not mapped in this stub") {
			t.Fatalf("ExecuteDone = %+v", done)
		}
		if p.maps(c.name) {
			t.Fatal("a region past the object was mapped")
		}
		p.Finalize()
	})
}
