package supervisor

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
	"github.com/stubvisor/stubvisor/shmpool/shmtest"
	"github.com/stubvisor/stubvisor/supervisor/sched"
)

// These tests run real python3 stubs on the models of testdata/models
// through the supervisor's Backend API, and check after each that no
// process, fd or /dev/shm entry is left behind.

// newSupervisor copies models into a temporary repository and starts a
// supervisor that loads all of them.
func newSupervisor(t *testing.T, models ...string) *Supervisor {
	t.Helper()
	return logSupervisor(t, hclog.New(&hclog.LoggerOptions{Level: hclog.LevelFromString(os.Getenv("STUBVISOR_TEST_LOG")), Output: testWriter{t}}), models...)
}

// logSupervisor is newSupervisor logging to log.
func logSupervisor(t *testing.T, log hclog.Logger, models ...string) *Supervisor {
	t.Helper()
	return startSupervisor(t, log, func(*Options) {}, models...)
}

// startSupervisor is logSupervisor with options edited by edit.
func startSupervisor(t *testing.T, log hclog.Logger, edit func(*Options), models ...string) *Supervisor {
	t.Helper()
	ipctest.RequirePython(t)
	repo := t.TempDir()
	for _, m := range models {
		if err := os.CopyFS(filepath.Join(repo, m), os.DirFS(filepath.Join("..", "testdata", "models", m))); err != nil {
			t.Fatal(err)
		}
	}
	shmtest.NoLeaks(t)
	opts := DefaultOptions()
	opts.Repositories = []string{repo}
	opts.CacheDir = t.TempDir()
	opts.RestartBackoff = 20 * time.Millisecond
	opts.Logger = log
	edit(&opts)
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(10 * time.Second) })
	return s
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func boolTensor(name string, v bool) backendapi.InputTensor {
	b := byte(0)
	if v {
		b = 1
	}
	return backendapi.InputTensor{Name: name, DataType: backendapi.TypeBool, Shape: []int64{1}, Data: []byte{b}}
}

func bytesTensor(name string, elems ...string) backendapi.InputTensor {
	var b []byte
	for _, e := range elems {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(e)))
		b = append(b, e...)
	}
	return backendapi.InputTensor{Name: name, DataType: backendapi.TypeBytes, Shape: []int64{int64(len(elems))}, Data: b}
}

func infer(t *testing.T, s *Supervisor, req *backendapi.InferRequest) *backendapi.InferResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := s.Infer(ctx, req)
	if err != nil {
		t.Fatalf("infer %s: %v", req.ModelName, err)
	}
	t.Cleanup(resp.Release)
	return resp
}

func TestAddSub(t *testing.T) {
	s := newSupervisor(t, "add_sub")
	resp := infer(t, s, &backendapi.InferRequest{ModelName: "add_sub", Inputs: []backendapi.InputTensor{
		{Name: "INPUT0", DataType: backendapi.TypeFP32, Shape: []int64{4}, Data: ipctest.FP32(1, 2, 3, 4)},
		{Name: "INPUT1", DataType: backendapi.TypeFP32, Shape: []int64{4}, Data: ipctest.FP32(0.5, 0.5, 0.5, 0.5)},
	}})
	want := map[string][]float32{"OUTPUT0": {1.5, 2.5, 3.5, 4.5}, "OUTPUT1": {0.5, 1.5, 2.5, 3.5}}
	if len(resp.Outputs) != 2 {
		t.Fatalf("outputs = %+v", resp.Outputs)
	}
	for _, o := range resp.Outputs {
		if got := ipctest.FP32s(o.Data); !slices.Equal(got, want[o.Name]) {
			t.Errorf("%s = %v, want %v", o.Name, got, want[o.Name])
		}
	}
	// Requested-output pruning: ask for OUTPUT1 only.
	resp = infer(t, s, &backendapi.InferRequest{ModelName: "add_sub", Inputs: []backendapi.InputTensor{
		{Name: "INPUT0", DataType: backendapi.TypeFP32, Shape: []int64{4}, Data: ipctest.FP32(1, 2, 3, 4)},
		{Name: "INPUT1", DataType: backendapi.TypeFP32, Shape: []int64{4}, Data: ipctest.FP32(1, 1, 1, 1)},
	}, Outputs: []backendapi.RequestedOutput{{Name: "OUTPUT1"}}})
	if len(resp.Outputs) != 1 || resp.Outputs[0].Name != "OUTPUT1" {
		t.Fatalf("pruned outputs = %+v", resp.Outputs)
	}
}

func TestIdentityEveryDataType(t *testing.T) {
	s := newSupervisor(t, "identity_all")
	req := &backendapi.InferRequest{ModelName: "identity_all"}
	for _, dt := range []backendapi.DataType{
		backendapi.TypeBool, backendapi.TypeUint8, backendapi.TypeUint16, backendapi.TypeUint32, backendapi.TypeUint64,
		backendapi.TypeInt8, backendapi.TypeInt16, backendapi.TypeInt32, backendapi.TypeInt64,
		backendapi.TypeFP16, backendapi.TypeFP32, backendapi.TypeFP64, backendapi.TypeBF16,
	} {
		data := make([]byte, 3*dt.Size())
		for i := range data {
			data[i] = byte(i*7 + int(dt))
		}
		if dt == backendapi.TypeBool {
			data = []byte{1, 0, 1}
		}
		req.Inputs = append(req.Inputs, backendapi.InputTensor{Name: "INPUT_" + dt.String(), DataType: dt, Shape: []int64{3}, Data: data})
	}
	req.Inputs = append(req.Inputs, bytesTensor("INPUT_STRING", "héllo", "", "\x00binary\xff"))
	resp := infer(t, s, req)
	got := map[string]backendapi.OutputTensor{}
	for _, o := range resp.Outputs {
		got[o.Name] = o
	}
	for _, in := range req.Inputs {
		name := "OUTPUT_" + strings.TrimPrefix(in.Name, "INPUT_")
		out, ok := got[name]
		if !ok {
			t.Errorf("missing output %s", name)
			continue
		}
		if out.DataType != in.DataType || !bytes.Equal(out.Data, in.Data) || !slices.Equal(out.Shape, in.Shape) {
			t.Errorf("%s = %s %v %x, want %s %v %x", name, out.DataType, out.Shape, out.Data, in.DataType, in.Shape, in.Data)
		}
	}
}

func TestDecoupledRepeat(t *testing.T) {
	s := newSupervisor(t, "repeat_decoupled")
	in := make([]byte, 0, 12)
	for _, v := range []int32{4, 5, 6} {
		in = binary.LittleEndian.AppendUint32(in, uint32(v))
	}
	req := &backendapi.InferRequest{ModelName: "repeat_decoupled", Inputs: []backendapi.InputTensor{
		{Name: "IN", DataType: backendapi.TypeInt32, Shape: []int64{3}, Data: in},
		{Name: "DELAY", DataType: backendapi.TypeUint32, Shape: []int64{3}, Data: make([]byte, 12)},
		{Name: "WAIT", DataType: backendapi.TypeUint32, Shape: []int64{1}, Data: make([]byte, 4)},
	}}
	if _, err := s.Infer(context.Background(), req); err != backendapi.ErrDecoupled {
		t.Fatalf("Infer on a decoupled model: %v, want ErrDecoupled", err)
	}
	var outs []int32
	finals := 0
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := s.InferStream(ctx, req, func(resp *backendapi.InferResponse, err error, final bool) {
		if err != nil {
			t.Errorf("stream error: %v", err)
		}
		if final {
			finals++
		}
		if resp == nil {
			return
		}
		for _, o := range resp.Outputs {
			if o.Name == "OUT" {
				outs = append(outs, int32(binary.LittleEndian.Uint32(o.Data)))
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(outs, []int32{4, 5, 6}) || finals != 1 {
		t.Fatalf("responses OUT=%v finals=%d, want [4 5 6] and 1", outs, finals)
	}
}

func TestExecuteRaises(t *testing.T) {
	s := newSupervisor(t, "execute_raises")
	_, err := s.Infer(context.Background(), &backendapi.InferRequest{ModelName: "execute_raises", Inputs: []backendapi.InputTensor{
		{Name: "INPUT0", DataType: backendapi.TypeFP32, Shape: []int64{1}, Data: ipctest.FP32(1)}}})
	if backendapi.CodeOf(err) != backendapi.Internal ||
		!strings.Contains(err.Error(), "Failed to process the request(s) for model 'execute_raises_0_0', message: RuntimeError: execute_raises: failing a batch of 1 request(s) on purpose") {
		t.Fatalf("err = %v (%s)", err, backendapi.CodeOf(err))
	}
	// The stub survives a model exception.
	st, _ := s.Stubs(context.Background(), "execute_raises")
	if st[0].Stubs[0].Restarts != 0 {
		t.Fatalf("stub restarted after an exception: %+v", st[0].Stubs[0])
	}
}

func TestErrorCodes(t *testing.T) {
	s := newSupervisor(t, "error_codes")
	for _, tc := range []struct {
		name string
		code backendapi.Code
	}{
		{"UNKNOWN", backendapi.Unknown}, {"INTERNAL", backendapi.Internal}, {"NOT_FOUND", backendapi.NotFound},
		{"INVALID_ARG", backendapi.InvalidArg}, {"UNAVAILABLE", backendapi.Unavailable}, {"UNSUPPORTED", backendapi.Unsupported},
		{"ALREADY_EXISTS", backendapi.AlreadyExists}, {"CANCELLED", backendapi.Cancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Infer(context.Background(), &backendapi.InferRequest{ModelName: "error_codes", Inputs: []backendapi.InputTensor{bytesTensor("CODE", tc.name)}})
			if err == nil || backendapi.CodeOf(err) != tc.code || err.Error() != "error_codes: "+tc.name {
				t.Fatalf("err = %v (code %s), want %q with code %s", err, backendapi.CodeOf(err), "error_codes: "+tc.name, tc.code)
			}
		})
	}
}

// stubPID returns the pid of the model's first stub once it is ready.
func stubPID(t *testing.T, s *Supervisor, model string, restarts int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := s.Stubs(context.Background(), model)
		if err != nil {
			t.Fatal(err)
		}
		if ss := st[0].Stubs[0]; ss.Restarts >= restarts && ss.PID != 0 && (ss.State == backendapi.StubReady || ss.State == backendapi.StubBusy) {
			return ss.PID
		}
		if time.Now().After(deadline) {
			t.Fatalf("stub of %s not ready after %d restarts: %+v", model, restarts, st)
		}
		time.Sleep(5 * time.Millisecond) // polling supervisor state: nothing to wait on
	}
}

// TestModelStateAgrees kills the only stub of a model whose restart waits
// a minute: the repository index, /v2/stubs, model and server readiness
// all say the model is unavailable, and all said it was ready before.
func TestModelStateAgrees(t *testing.T) {
	s := startSupervisor(t, hclog.NewNullLogger(), func(o *Options) {
		o.RestartBackoff, o.RestartBackoffMax, o.StrictReadiness = time.Minute, time.Minute, true
	}, "identity_fp32")
	ctx := context.Background()
	check := func(want backendapi.ModelState) {
		t.Helper()
		index, err := s.RepositoryIndex(ctx, false)
		if err != nil || len(index) != 1 || index[0].State != want {
			t.Errorf("index = %+v, %v; want state %s", index, err, want)
		}
		stubs, err := s.Stubs(ctx, "identity_fp32")
		if err != nil || len(stubs) != 1 || stubs[0].State != want {
			t.Errorf("stubs = %+v, %v; want state %s", stubs, err, want)
		}
		ready := want == backendapi.ModelReady
		if err := s.ModelReady(ctx, "identity_fp32", 0); (err == nil) != ready {
			t.Errorf("ModelReady = %v, want ready %v", err, ready)
		}
		if s.Ready() != ready {
			t.Errorf("server Ready = %v, want %v", s.Ready(), ready)
		}
	}
	check(backendapi.ModelReady)
	if err := syscall.Kill(stubPID(t, s, "identity_fp32", 0), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the stub to be restarting", func() bool {
		st, err := s.Stubs(ctx, "identity_fp32")
		return err == nil && st[0].Stubs[0].State == backendapi.StubRestarting
	})
	check(backendapi.ModelUnavailable)
}

func TestStubKillsItselfMidRequest(t *testing.T) {
	s := newSupervisor(t, "kill_self")
	req := func(kill bool) *backendapi.InferRequest {
		return &backendapi.InferRequest{ModelName: "kill_self", Inputs: []backendapi.InputTensor{
			{Name: "INPUT0", DataType: backendapi.TypeFP32, Shape: []int64{1}, Data: ipctest.FP32(7)}, boolTensor("KILL", kill)}}
	}
	infer(t, s, req(false))
	start := time.Now()
	_, err := s.Infer(context.Background(), req(true))
	if backendapi.CodeOf(err) != backendapi.Unavailable || !strings.Contains(err.Error(), "'kill_self_0_0'") ||
		!strings.Contains(err.Error(), "model 'kill_self'") || !strings.Contains(err.Error(), "signal: killed") {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("death detected after %s, want < 1s", d)
	}
	stubPID(t, s, "kill_self", 1)
	resp := infer(t, s, req(false))
	if got := ipctest.FP32s(resp.Outputs[0].Data); got[0] != 7 {
		t.Fatalf("after restart: %v", got)
	}
	st, _ := s.Stubs(context.Background(), "kill_self")
	if ss := st[0].Stubs[0]; ss.Restarts != 1 || !strings.Contains(ss.LastExitCause, "signal: killed") {
		t.Fatalf("status = %+v", ss)
	}
}

func TestHungExecuteIsKilled(t *testing.T) {
	s := newSupervisor(t, "hang")
	start := time.Now()
	_, err := s.Infer(context.Background(), &backendapi.InferRequest{ModelName: "hang", Inputs: []backendapi.InputTensor{
		{Name: "INPUT0", DataType: backendapi.TypeFP32, Shape: []int64{1}, Data: ipctest.FP32(1)}, boolTensor("HANG", true)}})
	if backendapi.CodeOf(err) != backendapi.Unavailable || !strings.Contains(err.Error(), "EXECUTE_TIMEOUT_MS=1000") {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d < time.Second || d > 3*time.Second {
		t.Errorf("hang ended after %s, want about 1s", d)
	}
	stubPID(t, s, "hang", 1)
	infer(t, s, &backendapi.InferRequest{ModelName: "hang", Inputs: []backendapi.InputTensor{
		{Name: "INPUT0", DataType: backendapi.TypeFP32, Shape: []int64{1}, Data: ipctest.FP32(1)}}})
}

func TestInitializeFailureIsALoadError(t *testing.T) {
	s := newSupervisor(t, "init_fails", "add_sub")
	idx, err := s.RepositoryIndex(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]backendapi.ModelIndexEntry{}
	for _, e := range idx {
		states[e.Name] = e
	}
	if e := states["init_fails"]; e.State != "UNAVAILABLE" || !strings.Contains(e.Reason, "initialize refuses to load this model") {
		t.Fatalf("init_fails = %+v", e)
	}
	if e := states["add_sub"]; e.State != "READY" {
		t.Fatalf("add_sub = %+v", e)
	}
	if _, err := s.Infer(context.Background(), &backendapi.InferRequest{ModelName: "init_fails"}); backendapi.CodeOf(err) != backendapi.Unavailable {
		t.Fatalf("infer on a failed model: %v", err)
	}
}

func TestAutoCompleteConfig(t *testing.T) {
	s := newSupervisor(t, "auto_complete")
	cfg, err := s.ModelConfig(context.Background(), "auto_complete", 0)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GetMaxBatchSize() != 8 || len(cfg.GetInput()) != 1 || cfg.GetInput()[0].GetName() != "INPUT0" || cfg.GetDynamicBatching() == nil {
		t.Fatalf("config = %v", cfg)
	}
}

// TestKillsUnderSteadyLoad SIGKILLs the stub 100 times while clients send
// a steady stream: only requests in flight at a kill fail, service returns
// after each kill, and nothing leaks (checked at cleanup).
func TestKillsUnderSteadyLoad(t *testing.T) {
	kills := 100
	if testing.Short() {
		kills = 10
	}
	s := newSupervisor(t, "identity_fp32")
	req := &backendapi.InferRequest{ModelName: "identity_fp32", Inputs: []backendapi.InputTensor{
		{Name: "INPUT0", DataType: backendapi.TypeFP32, Shape: []int64{4}, Data: ipctest.FP32(1, 2, 3, 4)}}}
	var ok, failed atomic.Int64
	var lastOK atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var badErr atomic.Value
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp, err := s.Infer(ctx, req)
				cancel()
				if err != nil {
					failed.Add(1)
					if backendapi.CodeOf(err) != backendapi.Unavailable || !strings.Contains(err.Error(), "identity_fp32_0") {
						badErr.Store(err.Error())
					}
					continue
				}
				resp.Release()
				ok.Add(1)
				lastOK.Store(time.Now().UnixNano())
			}
		}()
	}
	for i := range kills {
		pid := stubPID(t, s, "identity_fp32", i)
		before := ok.Load()
		waitUntil(t, 15*time.Second, "requests flowing", func() bool { return ok.Load() > before+5 })
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		stubPID(t, s, "identity_fp32", i+1)
		after := ok.Load()
		// A liveness bound, not a speed target: make soak reports recovery times.
		waitUntil(t, 15*time.Second, "requests succeeding after kill "+strconv.Itoa(i+1), func() bool { return ok.Load() > after })
	}
	close(stop)
	wg.Wait()
	if e := badErr.Load(); e != nil {
		t.Errorf("a failure did not name the instance or was not UNAVAILABLE: %v", e)
	}
	st, _ := s.Stubs(context.Background(), "identity_fp32")
	if r := st[0].Stubs[0].Restarts; r != kills {
		t.Errorf("restarts = %d, want %d", r, kills)
	}
	t.Logf("%d kills: %d requests succeeded, %d failed (in flight at a kill)", kills, ok.Load(), failed.Load())
	mv, _ := s.lookup("identity_fp32", 0)
	if depth := sched.PipelineDepth(mv.cfg, len(mv.instances)); failed.Load() > int64(kills)*int64(depth)*4 {
		t.Errorf("%d failures for %d kills: more than the requests in flight", failed.Load(), kills)
	}
}

// waitUntil polls cond (every 2ms) until it holds or timeout passes.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(2 * time.Millisecond) // polling counters: nothing to wait on
	}
}

// TestHeartbeatAdvances checks that a live stub keeps proving it is
// alive: its heartbeat age stays under two beat periods (the stub's beat
// and the watchdog's look, each a tenth of the timeout) plus scheduling
// noise, across several beats; an idle stub beats that rarely, not every
// 100 ms, so it costs few wake-ups.
func TestHeartbeatAdvances(t *testing.T) {
	cases := []struct {
		name    string
		timeout time.Duration
	}{
		{"short timeout, 100 ms beat", time.Second},
		{"default timeout, 3 s beat", DefaultOptions().HeartbeatTimeout},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := startSupervisor(t, hclog.NewNullLogger(), func(o *Options) { o.HeartbeatTimeout = c.timeout }, "add_sub")
			period := ipc.HeartbeatPeriodFor(c.timeout)
			deadline := time.Now().Add(2 * period)
			for time.Now().Before(deadline) {
				st, err := s.Stubs(context.Background(), "add_sub")
				if err != nil {
					t.Fatal(err)
				}
				if age := st[0].Stubs[0].HeartbeatAge; age > 2*period+500*time.Millisecond {
					t.Fatalf("heartbeat age %s with a %s beat: the stub stopped beating", age, period)
				}
				time.Sleep(period / 4) // sampling a status figure over time
			}
		})
	}
}

// TestSilentStubKilled stops a stub (SIGSTOP: it neither beats nor dies)
// and checks that the supervisor replaces it no sooner than the heartbeat
// timeout and no later than one beat period after it, with the cause.
func TestSilentStubKilled(t *testing.T) {
	const timeout = 2 * time.Second
	s := startSupervisor(t, hclog.NewNullLogger(), func(o *Options) { o.HeartbeatTimeout = timeout }, "add_sub")
	stub := func() backendapi.StubStatus {
		st, err := s.Stubs(context.Background(), "add_sub")
		if err != nil {
			t.Fatal(err)
		}
		return st[0].Stubs[0]
	}
	first := stub()
	if err := syscall.Kill(first.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(first.PID, syscall.SIGCONT) })
	stopped := time.Now()
	waitUntil(t, timeout+5*time.Second, "the silent stub to be replaced", func() bool {
		return stub().Restarts > first.Restarts
	})
	took := time.Since(stopped)
	// The last beat was at most one period before the stop; the watchdog
	// looks once a period.
	period := ipc.HeartbeatPeriodFor(timeout)
	if took < timeout-period || took > timeout+2*period+time.Second {
		t.Fatalf("replaced after %s, want about %s (beat period %s)", took, timeout, period)
	}
	if cause := stub().LastExitCause; !strings.Contains(cause, "no heartbeat") {
		t.Fatalf("last exit cause %q, want the heartbeat timeout", cause)
	}
}

func TestClassification(t *testing.T) {
	s := newSupervisor(t, "identity_fp32")
	resp := infer(t, s, &backendapi.InferRequest{ModelName: "identity_fp32",
		Inputs:  []backendapi.InputTensor{{Name: "INPUT0", DataType: backendapi.TypeFP32, Shape: []int64{4}, Data: ipctest.FP32(0.1, 0.9, -3, 0.5)}},
		Outputs: []backendapi.RequestedOutput{{Name: "OUTPUT0", Classification: 2}}})
	out := resp.Outputs[0]
	var got []string
	for b := out.Data; len(b) >= 4; {
		n := binary.LittleEndian.Uint32(b)
		got = append(got, string(b[4:4+n]))
		b = b[4+n:]
	}
	if out.DataType != backendapi.TypeBytes || !slices.Equal(out.Shape, []int64{2}) || !slices.Equal(got, []string{"0.900000:1", "0.500000:3"}) {
		t.Fatalf("classification = %s %v %q", out.DataType, out.Shape, got)
	}
}
