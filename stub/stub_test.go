package stub

// These tests re-execute the test binary as a Go stub (the TestMain role
// switch below) and drive it from the test through a real ipc.Conn, the
// way the supervisor does, without the supervisor.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
	"github.com/stubvisor/stubvisor/ipc/ipctest/fakesup"
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
		resps[i].Outputs = []Tensor{{Name: "MODEL", DataType: backendapi.TypeBytes, Shape: []int64{1}, Data: ipctest.BYTES(m.args["model_name"])}}
	}
	return resps
}

// noLifecycle is the Initialize and Finalize of a test model that needs
// neither.
type noLifecycle struct{}

func (noLifecycle) Initialize(map[string]string) error { return nil }
func (noLifecycle) Finalize() error                    { return nil }

// holdUntilCancelled sends r an empty response, then waits until r is
// cancelled; past fakesup.WaitBound it ends r with an INTERNAL "never
// cancelled" and reports false.
func holdUntilCancelled(r *ModelRequest) bool {
	_ = r.Send(ModelResponse{}, false)
	deadline := time.Now().Add(fakesup.WaitBound)
	for !r.Cancelled() {
		if time.Now().After(deadline) {
			_ = r.Send(ModelResponse{Err: backendapi.Errorf(backendapi.Internal, "never cancelled")}, true)
			return false
		}
	}
	return true
}

// repeatModel sends one response per IN element from a goroutine, then an
// empty final one.
type repeatModel struct{ noLifecycle }

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
type cancelModel struct{ noLifecycle }

func (cancelModel) Execute(reqs []*ModelRequest) []ModelResponse {
	for _, r := range reqs {
		if !holdUntilCancelled(r) {
			return nil
		}
		_ = r.Send(ModelResponse{Err: backendapi.Errorf(backendapi.Cancelled, "request cancelled")}, true)
	}
	return nil
}

// wrongSizeModel returns no responses at all, which fails the batch.
type wrongSizeModel struct{ noLifecycle }

func (wrongSizeModel) Execute(reqs []*ModelRequest) []ModelResponse {
	for _, r := range reqs {
		_, _ = r.Output("OUT0", backendapi.TypeInt32, []int64{4}) // freed by the stub when the batch fails
	}
	return []ModelResponse{}
}

// peer is the test's side of one helper stub: the shared fake supervisor
// and the calls these tests make to the Go stub's models.
type peer struct{ *fakesup.Stub }

// startStub runs this test binary as a stub serving role and completes the
// handshake; fakesup ends the process and closes the region at cleanup.
func startStub(t *testing.T, role string) *peer {
	t.Helper()
	return startGoStub(t, role, false)
}

// startGoStub is startStub, with a lifeline on fd 4 when lifeline is set.
func startGoStub(t *testing.T, role string, lifeline bool) *peer {
	t.Helper()
	s := ipc.DefaultSettings()
	s.Pool.DefaultBytes, s.Pool.GrowthBytes, s.Pool.MaxBytes = 1<<20, 1<<20, 16<<20
	cmd := fakesup.Self(roleEnv+"="+role, ipc.InstanceEnv+"="+role+"_0_0")
	p := &peer{fakesup.Start(t, cmd, fakesup.Options{Name: "stub-test", Settings: s, Lifeline: lifeline})}
	if p.Hello.Info["backend"] != "go" {
		t.Fatalf("hello = %+v, want backend go", p.Hello)
	}
	return p
}

func (p *peer) initialize(decoupled bool) {
	p.T.Helper()
	r := p.Call(func(id uint64) ipc.Message {
		return &ipc.InitializeMsg{ID: id, Args: map[string]string{"model_name": "m", "model_instance_name": "m_0_0"}, Options: map[string]any{"decoupled": decoupled}}
	})
	if r.Error != nil {
		p.T.Fatalf("initialize: %+v", r.Error)
	}
}

// input writes int32 values into the supervisor's arena.
func (p *peer) input(name string, vals ...int32) ipc.Tensor {
	p.T.Helper()
	return p.Tensor(name, backendapi.TypeInt32, []int64{int64(len(vals))}, ipctest.INT32(vals...))
}

func TestExecute(t *testing.T) {
	p := startStub(t, "echo")
	if v := p.IsReady(); v != false {
		t.Fatalf("IsReady before Initialize = %v, want false", v)
	}
	p.initialize(false)
	if v := p.IsReady(); v != true {
		t.Fatalf("IsReady = %v, want true", v)
	}
	if r := p.Call(func(id uint64) ipc.Message { return &ipc.AutoCompleteMsg{ID: id, ConfigJSON: `{"name":"m"}`} }); r.Value != `{"name":"m"}` {
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
			p.T = t
			in := p.input("IN0", 1, 2, 3, int32(i))
			batch := uint64(100 + i)
			p.Send(&ipc.ExecuteMsg{BatchID: batch, Requests: []ipc.Request{{Handle: 7, ID: "r", CorrelationID: uint64(0), Inputs: []ipc.Tensor{in}, RequestedOutputs: tc.requested, ParametersJSON: "{}"}}})
			done, ok := p.Recv().(*ipc.ExecuteDoneMsg)
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
					if got := ipctest.INT32s(p.Read(o)); fmt.Sprint(got) != fmt.Sprint([]int32{1, 2, 3, int32(i)}) || o.Loc != ipc.LocArena1 {
						t.Errorf("%s = %v at loc %d", o.Name, got, o.Loc)
					}
				case "MODEL":
					b, _ := p.Conn.View(o.Loc, o.Offset, o.Size)
					if !bytes.Equal(b, ipctest.BYTES("m")) {
						t.Errorf("MODEL = %q", b)
					}
				}
			}
			if strings.Join(names, ",") != strings.Join(tc.wantNames, ",") {
				t.Fatalf("outputs %v, want %v", names, tc.wantNames)
			}
			p.Release(resp)
			// A stray and a repeated offset must not free a live block.
			p.Release(resp)
			p.Send(&ipc.ReleaseMsg{Offsets: []uint64{1 << 30}})
			p.StubInUse(0)
			if err := p.Conn.Free(in.Offset); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("inline input", func(t *testing.T) {
		// The supervisor sends an input of at most InlineMax bytes in the
		// message: the model sees the same bytes.
		p.T = t
		data := ipctest.INT32(4, 5, 6)
		in := ipc.Tensor{Name: "IN0", DataType: uint8(backendapi.TypeInt32), Shape: []int64{3}, Loc: ipc.LocInline, Size: uint64(len(data)), Data: data}
		p.Send(&ipc.ExecuteMsg{BatchID: 300, Requests: []ipc.Request{{Handle: 10, CorrelationID: uint64(0), Inputs: []ipc.Tensor{in}, RequestedOutputs: []string{"OUT0"}, ParametersJSON: "{}"}}})
		done, ok := p.Recv().(*ipc.ExecuteDoneMsg)
		if !ok || done.Error != nil || len(done.Responses) != 1 || len(done.Responses[0].Outputs) != 1 {
			t.Fatalf("ExecuteDone = %+v", done)
		}
		if got := ipctest.INT32s(p.Read(done.Responses[0].Outputs[0])); fmt.Sprint(got) != "[4 5 6]" {
			t.Fatalf("OUT0 = %v, want [4 5 6]", got)
		}
		p.Release(done.Responses[0])
		p.StubInUse(0)
	})
	t.Run("rescheduled", func(t *testing.T) {
		p.T = t
		keep, back := p.input("IN0", 5), p.input("IN0", -2)
		p.Send(&ipc.ExecuteMsg{BatchID: 200, Requests: []ipc.Request{
			{Handle: 8, CorrelationID: uint64(3), Inputs: []ipc.Tensor{keep}, ParametersJSON: "{}"},
			{Handle: 9, CorrelationID: uint64(4), Inputs: []ipc.Tensor{back}, ParametersJSON: "{}"},
		}})
		done, ok := p.Recv().(*ipc.ExecuteDoneMsg)
		if !ok || done.Error != nil || len(done.Responses) != 1 || done.Responses[0].Handle != 8 || fmt.Sprint(done.Rescheduled) != "[9]" {
			t.Fatalf("ExecuteDone = %+v, want an answer for 8 and 9 handed back", done)
		}
		p.Release(done.Responses[0])
		p.StubInUse(0) // the handed-back request's output went with it
		for _, in := range []ipc.Tensor{keep, back} {
			if err := p.Conn.Free(in.Offset); err != nil {
				t.Fatal(err)
			}
		}
	})
	p.T = t
	p.Finalize()
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
			p.Send(&ipc.ExecuteMsg{BatchID: 1, Requests: []ipc.Request{{Handle: 1, Inputs: []ipc.Tensor{in}}}})
			done, ok := p.Recv().(*ipc.ExecuteDoneMsg)
			if !ok || done.Error == nil || len(done.Responses) != 0 {
				t.Fatalf("ExecuteDone = %+v, want a batch error", done)
			}
			if backendapi.Code(done.Error.Code) != tc.wantCode || !strings.Contains(done.Error.Message, tc.wantText) ||
				!strings.Contains(done.Error.Message, "Failed to process the request(s) for model '"+tc.role+"_0_0'") {
				t.Fatalf("error = %+v, want %s containing %q", done.Error, tc.wantCode, tc.wantText)
			}
			p.StubInUse(0) // outputs of the failed batch were freed
			_ = p.Conn.Free(in.Offset)
			p.Finalize()
		})
	}
}

func TestInitializeError(t *testing.T) {
	p := startStub(t, "initfail")
	r := p.Call(func(id uint64) ipc.Message { return &ipc.InitializeMsg{ID: id, Options: map[string]any{}} })
	if r.Error == nil || backendapi.Code(r.Error.Code) != backendapi.InvalidArg || r.Error.Message != "bad parameter 'X'" {
		t.Fatalf("initialize reply = %+v, want INVALID_ARG \"bad parameter 'X'\"", r.Error)
	}
	if v := p.IsReady(); v != false {
		t.Fatalf("IsReady after a failed Initialize = %v", v)
	}
	p.Finalize()
}

func TestDecoupled(t *testing.T) {
	p := startStub(t, "repeat")
	p.initialize(true)
	in := p.input("IN", 10, 20, 30)
	p.Send(&ipc.ExecuteMsg{BatchID: 1, Requests: []ipc.Request{{Handle: 5, Inputs: []ipc.Tensor{in}}}})
	resps := p.Stream()
	var got []int32
	for _, r := range resps {
		if r.Handle != 5 || r.Error != nil {
			t.Fatalf("response = %+v", r)
		}
		if r.Flags&ipc.FlagFinal != 0 {
			if len(r.Outputs) != 0 {
				t.Fatalf("final response has outputs %+v", r.Outputs)
			}
			continue
		}
		got = append(got, ipctest.INT32s(p.Read(r.Outputs[0]))...)
	}
	if fmt.Sprint(got) != "[10 20 30]" {
		t.Fatalf("streamed %v, want [10 20 30]", got)
	}
	p.Release(resps...)
	p.StubInUse(0)
	_ = p.Conn.Free(in.Offset)
	p.Finalize()
}

func TestCancel(t *testing.T) {
	p := startStub(t, "cancel")
	p.initialize(true)
	p.Send(&ipc.ExecuteMsg{BatchID: 1, Requests: []ipc.Request{{Handle: 9}}})
	first, ok := p.Recv().(*ipc.ResponseMsg)
	if !ok || first.Response.Handle != 9 || first.Response.Flags != 0 {
		t.Fatalf("first = %+v", first)
	}
	// Execute is still running: the model sees the Cancel by pumping.
	p.Send(&ipc.CancelMsg{Handle: 9})
	final, ok := p.Recv().(*ipc.ResponseMsg)
	if !ok || final.Response.Flags&ipc.FlagFinal == 0 || final.Response.Error == nil || backendapi.Code(final.Response.Error.Code) != backendapi.Cancelled {
		t.Fatalf("final = %+v, want a CANCELLED final response", final)
	}
	if done, ok := p.Recv().(*ipc.ExecuteDoneMsg); !ok || done.Error != nil {
		t.Fatalf("ExecuteDone = %+v", done)
	}
	p.Finalize()
}

func TestPanicCrashesStub(t *testing.T) {
	p := startStub(t, "echo")
	p.initialize(false)
	in := p.input("IN0", -1, 0, 0, 0)
	p.Send(&ipc.ExecuteMsg{BatchID: 1, Requests: []ipc.Request{{Handle: 1, Inputs: []ipc.Tensor{in}}}})
	// The stub reports the panic in a Log record, then dies.
	var logged string
	for logged == "" {
		m, err := p.Conn.Recv(time.Now().Add(fakesup.WaitBound))
		if err != nil {
			break // dead before we read the record: stderr still tells
		}
		if l, ok := m.(*ipc.LogMsg); ok && l.Level == "ERROR" {
			logged = l.Message
		}
	}
	if code := p.ExitCode(); code != 2 {
		t.Fatalf("stub exit status %d, want 2 (a Go panic)", code)
	}
	if !strings.Contains(p.Stderr.String(), "panic: echo: IN0[0] == -1") {
		t.Fatalf("stderr lacks the panic:\n%s", p.Stderr)
	}
	if logged != "" && !strings.Contains(logged, "panicked in Execute: echo: IN0[0] == -1") {
		t.Fatalf("log record = %q", logged)
	}
}

func TestExitsWhenSupervisorDies(t *testing.T) {
	p := startStub(t, "echo")
	p.initialize(false)
	p.Conn.MarkDead() // the supervisor tearing the region down
	if code := p.ExitCode(); code != exitPeerDead {
		t.Fatalf("stub exit status %d, want %d", code, exitPeerDead)
	}
}

func TestIgnoresSIGTERM(t *testing.T) {
	p := startStub(t, "echo")
	p.initialize(false)
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.Cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	// Still serving: a round trip after the signals were delivered.
	if v := p.IsReady(); v != true {
		t.Fatalf("IsReady after SIGTERM = %v", v)
	}
	p.Finalize()
}
