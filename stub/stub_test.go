package stub

// These tests re-execute the test binary as a Go stub (the TestMain role
// switch below) and drive it from the test through a real ipc.Conn, the
// way the supervisor does, without the supervisor.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
	"github.com/stubvisor/stubvisor/shmpool/shmtest"
)

const roleEnv = "STUBVISOR_STUB_TEST_ROLE"

func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		model, ok := roles[role]
		if !ok {
			fmt.Fprintf(os.Stderr, "unknown role %q\n", role)
			os.Exit(3)
		}
		Serve(model)
	}
	os.Exit(m.Run())
}

// roles are the models a helper process can serve.
var roles = map[string]Model{
	"echo":      &echoModel{},
	"repeat":    &repeatModel{},
	"cancel":    &cancelModel{},
	"initfail":  &echoModel{initErr: backendapi.Errorf(backendapi.InvalidArg, "bad parameter 'X'")},
	"wrongsize": &wrongSizeModel{},
	"alias":     &aliasModel{},
	"sloppy":    &sloppyModel{},
}

// echoModel copies IN0 to OUT0 and OUT1 (both fixed-size); IN0[0] == -1
// makes it panic, and -2 hands the request back for rescheduling.
type echoModel struct {
	initErr error
	args    map[string]string
}

func (m *echoModel) Initialize(args map[string]string) error { m.args = args; return m.initErr }
func (m *echoModel) Finalize() error                         { return nil }
func (m *echoModel) Execute(reqs []*ModelRequest) []ModelResponse {
	resps := make([]ModelResponse, len(reqs))
	for i, r := range reqs {
		in, ok := r.Input("IN0")
		if !ok {
			resps[i].Err = backendapi.Errorf(backendapi.InvalidArg, "no IN0")
			continue
		}
		if len(in.Data) >= 4 && int32(binary.LittleEndian.Uint32(in.Data)) == -1 {
			panic("echo: IN0[0] == -1")
		}
		if len(in.Data) >= 4 && int32(binary.LittleEndian.Uint32(in.Data)) == -2 {
			_, _ = r.Output("OUT0", in.DataType, in.Shape) // dropped with the answer
			r.Reschedule = true
			continue
		}
		for _, name := range []string{"OUT0", "OUT1"} {
			out, err := r.Output(name, in.DataType, in.Shape)
			if err != nil {
				resps[i].Err = err
				break
			}
			copy(out, in.Data)
		}
		// One output from ordinary Go memory, copied by the stub.
		resps[i].Outputs = []Tensor{{Name: "MODEL", DataType: backendapi.TypeBytes, Shape: []int64{1}, Data: bytesElem(m.args["model_name"])}}
	}
	return resps
}

// repeatModel sends one response per IN element from a goroutine, then an
// empty final one.
type repeatModel struct{}

func (repeatModel) Initialize(map[string]string) error { return nil }
func (repeatModel) Finalize() error                    { return nil }
func (repeatModel) Execute(reqs []*ModelRequest) []ModelResponse {
	for _, r := range reqs {
		go func() {
			in, _ := r.Input("IN")
			for i := 0; i+4 <= len(in.Data); i += 4 {
				out, err := r.Output("OUT", backendapi.TypeInt32, []int64{1})
				if err != nil {
					_ = r.Send(ModelResponse{Err: err}, true)
					return
				}
				copy(out, in.Data[i:i+4])
				_ = r.Send(ModelResponse{}, false)
			}
			_ = r.Send(ModelResponse{}, true)
		}()
	}
	return nil
}

// cancelModel sends one response, then waits until the request is
// cancelled (bounded) and ends it with a CANCELLED error.
type cancelModel struct{}

func (cancelModel) Initialize(map[string]string) error { return nil }
func (cancelModel) Finalize() error                    { return nil }
func (cancelModel) Execute(reqs []*ModelRequest) []ModelResponse {
	for _, r := range reqs {
		_ = r.Send(ModelResponse{}, false)
		deadline := time.Now().Add(10 * time.Second)
		for !r.Cancelled() {
			if time.Now().After(deadline) {
				_ = r.Send(ModelResponse{Err: backendapi.Errorf(backendapi.Internal, "never cancelled")}, true)
				return nil
			}
		}
		_ = r.Send(ModelResponse{Err: backendapi.Errorf(backendapi.Cancelled, "request cancelled")}, true)
	}
	return nil
}

// wrongSizeModel returns no responses at all, which fails the batch.
type wrongSizeModel struct{}

func (wrongSizeModel) Initialize(map[string]string) error { return nil }
func (wrongSizeModel) Finalize() error                    { return nil }
func (wrongSizeModel) Execute(reqs []*ModelRequest) []ModelResponse {
	for _, r := range reqs {
		_, _ = r.Output("OUT0", backendapi.TypeInt32, []int64{4}) // freed by the stub when the batch fails
	}
	return []ModelResponse{}
}

func bytesElem(s string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(s)))
	return append(b, s...)
}

// peer is the test's side of one helper stub.
type peer struct {
	t      *testing.T
	conn   *ipc.Conn
	cmd    *exec.Cmd
	stderr *ipctest.LockedBuffer
	exited chan struct{}
	err    error
	nextID uint64
}

const waitBound = 10 * time.Second

// startStub runs this test binary as a stub serving role and completes the
// handshake. The process is killed and the region closed at cleanup.
func startStub(t *testing.T, role string) *peer {
	t.Helper()
	return startStubFiles(t, role)
}

// startStubFiles is startStub with extra descriptors for the stub, from
// fd 4 on (the lifeline). The caller closes its copies.
func startStubFiles(t *testing.T, role string, extra ...*os.File) *peer {
	t.Helper()
	s := ipc.DefaultSettings()
	s.Pool.DefaultBytes, s.Pool.GrowthBytes, s.Pool.MaxBytes = 1<<20, 1<<20, 16<<20
	conn, err := ipc.Create("stub-test", s)
	if err != nil {
		t.Fatal(err)
	}
	p := &peer{t: t, conn: conn, stderr: &ipctest.LockedBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(), roleEnv+"="+role, ipc.InstanceEnv+"="+role+"_0_0")
	p.cmd.ExtraFiles = append([]*os.File{conn.File()}, extra...)
	p.cmd.Stderr = p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		conn.Close()
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		conn.MarkDead() // what the supervisor's reaper does
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
		conn.Close()
	})
	hello, ok := p.recv().(*ipc.HelloMsg)
	if !ok || hello.Version != ipc.ProtocolVersion || hello.PID != int64(p.cmd.Process.Pid) || hello.Info["backend"] != "go" {
		t.Fatalf("hello = %+v", hello)
	}
	if got := conn.StubPID(); got != p.cmd.Process.Pid {
		t.Fatalf("stub pid in control block = %d, want %d", got, p.cmd.Process.Pid)
	}
	return p
}

func (p *peer) send(m ipc.Message) {
	p.t.Helper()
	if err := p.conn.Send(m); err != nil {
		p.t.Fatalf("send %T: %v", m, err)
	}
}

// recv returns the next message that is not a Log.
func (p *peer) recv() ipc.Message {
	p.t.Helper()
	for {
		m, err := p.conn.Recv(time.Now().Add(waitBound))
		if err != nil {
			p.t.Fatalf("recv: %v\nstub stderr:\n%s", err, p.stderr)
		}
		if _, ok := m.(*ipc.LogMsg); !ok {
			return m
		}
	}
}

// call sends a request built with a fresh id and returns its Result.
func (p *peer) call(build func(id uint64) ipc.Message) *ipc.ResultMsg {
	p.t.Helper()
	p.nextID++
	id := p.nextID
	p.send(build(id))
	r, ok := p.recv().(*ipc.ResultMsg)
	if !ok || r.ID != id {
		p.t.Fatalf("reply to %d = %+v", id, r)
	}
	return r
}

func (p *peer) initialize(decoupled bool) {
	p.t.Helper()
	r := p.call(func(id uint64) ipc.Message {
		return &ipc.InitializeMsg{ID: id, Args: map[string]string{"model_name": "m", "model_instance_name": "m_0_0"}, Options: map[string]any{"decoupled": decoupled}}
	})
	if r.Error != nil {
		p.t.Fatalf("initialize: %+v", r.Error)
	}
}

// input writes int32 values into the supervisor's arena.
func (p *peer) input(name string, vals ...int32) ipc.Tensor {
	p.t.Helper()
	off, buf, err := p.conn.Alloc(uint64(4 * len(vals)))
	if err != nil {
		p.t.Fatal(err)
	}
	for i, v := range vals {
		binary.LittleEndian.PutUint32(buf[4*i:], uint32(v))
	}
	return ipc.Tensor{Name: name, DataType: uint8(backendapi.TypeInt32), Shape: []int64{int64(len(vals))}, Loc: ipc.LocArena0, Offset: off, Size: uint64(4 * len(vals))}
}

func (p *peer) int32s(t ipc.Tensor) []int32 {
	p.t.Helper()
	b, err := p.conn.View(t.Loc, t.Offset, t.Size)
	if err != nil {
		p.t.Fatal(err)
	}
	out := make([]int32, len(b)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// release hands every arena-1 output of rs back, as the supervisor does.
func (p *peer) release(rs ...ipc.Response) {
	p.t.Helper()
	var offs []uint64
	for _, r := range rs {
		for _, t := range r.Outputs {
			if t.Loc == ipc.LocArena1 && t.Size > 0 {
				offs = append(offs, t.Offset)
			}
		}
	}
	p.send(&ipc.ReleaseMsg{Offsets: offs})
}

// stubInUse waits until the stub's published arena usage is want bytes.
func (p *peer) stubInUse(want uint64) {
	p.t.Helper()
	// The stub publishes its usage in the control block; a round trip
	// (IsReady) orders our read after it handled the Release.
	p.call(func(id uint64) ipc.Message { return &ipc.IsReadyMsg{ID: id} })
	if _, peerUsage := p.conn.Usage(); peerUsage.InUse != want {
		p.t.Fatalf("stub arena in use = %d bytes, want %d", peerUsage.InUse, want)
	}
}

// finalize asks the stub to finalize and waits for it to exit 0.
func (p *peer) finalize() {
	p.t.Helper()
	if r := p.call(func(id uint64) ipc.Message { return &ipc.FinalizeMsg{ID: id} }); r.Error != nil {
		p.t.Fatalf("finalize: %+v", r.Error)
	}
	p.waitExit()
	if p.err != nil {
		p.t.Fatalf("stub exited with %v after Finalize\n%s", p.err, p.stderr)
	}
}

func (p *peer) waitExit() {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(waitBound):
		p.t.Fatalf("stub did not exit within %s", waitBound)
	}
}

func TestExecute(t *testing.T) {
	shmtest.NoLeaks(t)
	p := startStub(t, "echo")
	if r := p.call(func(id uint64) ipc.Message { return &ipc.IsReadyMsg{ID: id} }); r.Value != false {
		t.Fatalf("IsReady before Initialize = %v, want false", r.Value)
	}
	p.initialize(false)
	if r := p.call(func(id uint64) ipc.Message { return &ipc.IsReadyMsg{ID: id} }); r.Value != true {
		t.Fatalf("IsReady = %v, want true", r.Value)
	}
	if r := p.call(func(id uint64) ipc.Message { return &ipc.AutoCompleteMsg{ID: id, ConfigJSON: `{"name":"m"}`} }); r.Value != `{"name":"m"}` {
		t.Fatalf("AutoComplete = %v, want the config unchanged", r.Value)
	}

	tests := []struct {
		name      string
		requested []string
		wantNames []string
	}{
		{name: "all outputs", wantNames: []string{"OUT0", "OUT1", "MODEL"}},
		{name: "pruned to OUT1", requested: []string{"OUT1"}, wantNames: []string{"OUT1"}},
		{name: "pruned to MODEL", requested: []string{"MODEL"}, wantNames: []string{"MODEL"}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p.t = t
			in := p.input("IN0", 1, 2, 3, int32(i))
			batch := uint64(100 + i)
			p.send(&ipc.ExecuteMsg{BatchID: batch, Requests: []ipc.Request{{Handle: 7, ID: "r", CorrelationID: uint64(0), Inputs: []ipc.Tensor{in}, RequestedOutputs: tc.requested, ParametersJSON: "{}"}}})
			done, ok := p.recv().(*ipc.ExecuteDoneMsg)
			if !ok || done.BatchID != batch || done.Error != nil || len(done.Responses) != 1 {
				t.Fatalf("ExecuteDone = %+v", done)
			}
			resp := done.Responses[0]
			if resp.Handle != 7 || resp.Flags != ipc.FlagFinal || resp.Error != nil {
				t.Fatalf("response = %+v", resp)
			}
			var names []string
			for _, o := range resp.Outputs {
				names = append(names, o.Name)
				switch o.Name {
				case "OUT0", "OUT1":
					if got := p.int32s(o); fmt.Sprint(got) != fmt.Sprint([]int32{1, 2, 3, int32(i)}) || o.Loc != ipc.LocArena1 {
						t.Errorf("%s = %v at loc %d", o.Name, got, o.Loc)
					}
				case "MODEL":
					b, _ := p.conn.View(o.Loc, o.Offset, o.Size)
					if !bytes.Equal(b, bytesElem("m")) {
						t.Errorf("MODEL = %q", b)
					}
				}
			}
			if strings.Join(names, ",") != strings.Join(tc.wantNames, ",") {
				t.Fatalf("outputs %v, want %v", names, tc.wantNames)
			}
			p.release(resp)
			// A stray and a repeated offset must not free a live block.
			p.release(resp)
			p.send(&ipc.ReleaseMsg{Offsets: []uint64{1 << 30}})
			p.stubInUse(0)
			if err := p.conn.Free(in.Offset); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("rescheduled", func(t *testing.T) {
		p.t = t
		keep, back := p.input("IN0", 5), p.input("IN0", -2)
		p.send(&ipc.ExecuteMsg{BatchID: 200, Requests: []ipc.Request{
			{Handle: 8, CorrelationID: uint64(3), Inputs: []ipc.Tensor{keep}, ParametersJSON: "{}"},
			{Handle: 9, CorrelationID: uint64(4), Inputs: []ipc.Tensor{back}, ParametersJSON: "{}"},
		}})
		done, ok := p.recv().(*ipc.ExecuteDoneMsg)
		if !ok || done.Error != nil || len(done.Responses) != 1 || done.Responses[0].Handle != 8 || fmt.Sprint(done.Rescheduled) != "[9]" {
			t.Fatalf("ExecuteDone = %+v, want an answer for 8 and 9 handed back", done)
		}
		p.release(done.Responses[0])
		p.stubInUse(0) // the handed-back request's output went with it
		for _, in := range []ipc.Tensor{keep, back} {
			if err := p.conn.Free(in.Offset); err != nil {
				t.Fatal(err)
			}
		}
	})
	p.t = t
	p.finalize()
}

func TestBatchErrors(t *testing.T) {
	shmtest.NoLeaks(t)
	tests := []struct {
		name      string
		role      string
		initFirst bool
		wantCode  backendapi.Code
		wantText  string
	}{
		{name: "execute before initialize", role: "echo", wantCode: backendapi.Internal, wantText: "is not initialized"},
		{name: "wrong number of responses", role: "wrongsize", initFirst: true, wantCode: backendapi.Internal, wantText: "Request(s) size is:1, and response(s) size is:0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := startStub(t, tc.role)
			if tc.initFirst {
				p.initialize(false)
			}
			in := p.input("IN0", 1, 2, 3, 4)
			p.send(&ipc.ExecuteMsg{BatchID: 1, Requests: []ipc.Request{{Handle: 1, Inputs: []ipc.Tensor{in}}}})
			done, ok := p.recv().(*ipc.ExecuteDoneMsg)
			if !ok || done.Error == nil || len(done.Responses) != 0 {
				t.Fatalf("ExecuteDone = %+v, want a batch error", done)
			}
			if backendapi.Code(done.Error.Code) != tc.wantCode || !strings.Contains(done.Error.Message, tc.wantText) ||
				!strings.Contains(done.Error.Message, "Failed to process the request(s) for model '"+tc.role+"_0_0'") {
				t.Fatalf("error = %+v, want %s containing %q", done.Error, tc.wantCode, tc.wantText)
			}
			p.stubInUse(0) // outputs of the failed batch were freed
			_ = p.conn.Free(in.Offset)
			p.finalize()
		})
	}
}

func TestInitializeError(t *testing.T) {
	shmtest.NoLeaks(t)
	p := startStub(t, "initfail")
	r := p.call(func(id uint64) ipc.Message { return &ipc.InitializeMsg{ID: id, Options: map[string]any{}} })
	if r.Error == nil || backendapi.Code(r.Error.Code) != backendapi.InvalidArg || r.Error.Message != "bad parameter 'X'" {
		t.Fatalf("initialize reply = %+v, want INVALID_ARG \"bad parameter 'X'\"", r.Error)
	}
	if r := p.call(func(id uint64) ipc.Message { return &ipc.IsReadyMsg{ID: id} }); r.Value != false {
		t.Fatalf("IsReady after a failed Initialize = %v", r.Value)
	}
	p.finalize()
}

func TestDecoupled(t *testing.T) {
	shmtest.NoLeaks(t)
	p := startStub(t, "repeat")
	p.initialize(true)
	in := p.input("IN", 10, 20, 30)
	p.send(&ipc.ExecuteMsg{BatchID: 1, Requests: []ipc.Request{{Handle: 5, Inputs: []ipc.Tensor{in}}}})
	var got []int32
	var resps []ipc.Response
	sawDone, sawFinal := false, false
	for !sawDone || !sawFinal {
		switch m := p.recv().(type) {
		case *ipc.ExecuteDoneMsg:
			if m.Error != nil || len(m.Responses) != 0 {
				t.Fatalf("decoupled ExecuteDone = %+v", m)
			}
			sawDone = true
		case *ipc.ResponseMsg:
			r := m.Response
			if sawFinal || r.Handle != 5 || r.Error != nil {
				t.Fatalf("response = %+v (after final: %v)", r, sawFinal)
			}
			if r.Flags&ipc.FlagFinal != 0 {
				sawFinal = true
				if len(r.Outputs) != 0 {
					t.Fatalf("final response has outputs %+v", r.Outputs)
				}
				continue
			}
			got = append(got, p.int32s(r.Outputs[0])...)
			resps = append(resps, r)
		default:
			t.Fatalf("unexpected %T", m)
		}
	}
	if fmt.Sprint(got) != "[10 20 30]" {
		t.Fatalf("streamed %v, want [10 20 30]", got)
	}
	p.release(resps...)
	p.stubInUse(0)
	_ = p.conn.Free(in.Offset)
	p.finalize()
}

func TestCancel(t *testing.T) {
	shmtest.NoLeaks(t)
	p := startStub(t, "cancel")
	p.initialize(true)
	p.send(&ipc.ExecuteMsg{BatchID: 1, Requests: []ipc.Request{{Handle: 9}}})
	first, ok := p.recv().(*ipc.ResponseMsg)
	if !ok || first.Response.Handle != 9 || first.Response.Flags != 0 {
		t.Fatalf("first = %+v", first)
	}
	// Execute is still running: the model sees the Cancel by pumping.
	p.send(&ipc.CancelMsg{Handle: 9})
	final, ok := p.recv().(*ipc.ResponseMsg)
	if !ok || final.Response.Flags&ipc.FlagFinal == 0 || final.Response.Error == nil || backendapi.Code(final.Response.Error.Code) != backendapi.Cancelled {
		t.Fatalf("final = %+v, want a CANCELLED final response", final)
	}
	if done, ok := p.recv().(*ipc.ExecuteDoneMsg); !ok || done.Error != nil {
		t.Fatalf("ExecuteDone = %+v", done)
	}
	p.finalize()
}

func TestPanicCrashesStub(t *testing.T) {
	shmtest.NoLeaks(t)
	p := startStub(t, "echo")
	p.initialize(false)
	in := p.input("IN0", -1, 0, 0, 0)
	p.send(&ipc.ExecuteMsg{BatchID: 1, Requests: []ipc.Request{{Handle: 1, Inputs: []ipc.Tensor{in}}}})
	// The stub reports the panic in a Log record, then dies.
	var logged string
	for logged == "" {
		m, err := p.conn.Recv(time.Now().Add(waitBound))
		if err != nil {
			break // dead before we read the record: stderr still tells
		}
		if l, ok := m.(*ipc.LogMsg); ok && l.Level == "ERROR" {
			logged = l.Message
		}
	}
	p.waitExit()
	var exitErr *exec.ExitError
	if !errors.As(p.err, &exitErr) || exitErr.ExitCode() != 2 {
		t.Fatalf("stub exit = %v, want exit status 2 (a Go panic)", p.err)
	}
	if !strings.Contains(p.stderr.String(), "panic: echo: IN0[0] == -1") {
		t.Fatalf("stderr lacks the panic:\n%s", p.stderr)
	}
	if logged != "" && !strings.Contains(logged, "panicked in Execute: echo: IN0[0] == -1") {
		t.Fatalf("log record = %q", logged)
	}
}

func TestExitsWhenSupervisorDies(t *testing.T) {
	shmtest.NoLeaks(t)
	p := startStub(t, "echo")
	p.initialize(false)
	p.conn.MarkDead() // the supervisor tearing the region down
	p.waitExit()
	var exitErr *exec.ExitError
	if !errors.As(p.err, &exitErr) || exitErr.ExitCode() != exitPeerDead {
		t.Fatalf("stub exit = %v, want status %d", p.err, exitPeerDead)
	}
}

func TestIgnoresSIGTERM(t *testing.T) {
	shmtest.NoLeaks(t)
	p := startStub(t, "echo")
	p.initialize(false)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	// Still serving: a round trip after the signals were delivered.
	if r := p.call(func(id uint64) ipc.Message { return &ipc.IsReadyMsg{ID: id} }); r.Value != true {
		t.Fatalf("IsReady after SIGTERM = %v", r.Value)
	}
	p.finalize()
}
