package python

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/backendapi/modelconfig"
	"github.com/stubvisor/stubvisor/ipc"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
	"github.com/stubvisor/stubvisor/ipc/ipctest/fakesup"
)

var modelsDir = filepath.Join("..", "testdata", "models")

var (
	extractOnce sync.Once
	extractDir  string
	extractErr  error
)

// stubPath extracts the embedded stub once per test binary, into a
// directory removed when the tests end (see TestMain).
func stubPath(t testing.TB) string {
	t.Helper()
	extractOnce.Do(func() {
		extractDir, extractErr = os.MkdirTemp("", "stubvisor-python-test-")
		if extractErr == nil {
			extractDir, extractErr = Extract(extractDir)
		}
	})
	if extractErr != nil {
		t.Fatal(extractErr)
	}
	return extractDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if extractDir != "" {
		os.RemoveAll(filepath.Dir(extractDir))
	}
	os.Exit(code)
}

// stub is a running Python stub on its own region, with the test as the
// supervisor (the shared fake supervisor), and the instance it serves.
type stub struct {
	*fakesup.Stub
	instance string
}

func startStub(t testing.TB, instance string) *stub {
	t.Helper()
	cmd := fakesup.PythonStub(t, stubPath(t), Module, instance)
	return &stub{fakesup.Start(t, cmd, fakesup.Options{Name: "stubtest-" + instance}), instance}
}

// modelConfig returns the absolute directory of model in testdata/models
// and its configuration as read (modelconfig.Read as written,
// modelconfig.Load completed and checked) and printed as JSON for the stub.
func modelConfig(t testing.TB, model string, read func(dir string) (*inferencepb.ModelConfig, error)) (dir, cfgJSON string) {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join(modelsDir, model))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := read(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := modelconfig.ToJSON(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return dir, string(b)
}

// initialize loads a model of testdata/models with its real configuration
// (config.pbtxt as the supervisor would print it) and the seven args.
func (s *stub) initialize(model string, decoupled bool) *ipc.ResultMsg {
	s.T.Helper()
	dir, cfgJSON := modelConfig(s.T, model, func(dir string) (*inferencepb.ModelConfig, error) { return modelconfig.Load(dir) })
	id := s.ID()
	s.Send(&ipc.InitializeMsg{
		ID: id,
		Args: map[string]string{
			"model_config":             cfgJSON,
			"model_instance_kind":      "CPU",
			"model_instance_name":      s.instance,
			"model_instance_device_id": "0",
			"model_repository":         dir,
			"model_version":            "1",
			"model_name":               model,
		},
		Options: map[string]any{
			"model_file":                   filepath.Join(dir, "1", "model.py"),
			"decoupled":                    decoupled,
			"force_cpu_only_input_tensors": true,
		},
	})
	res := s.Expect(ipc.KindResult).(*ipc.ResultMsg)
	if res.ID != id {
		s.T.Fatalf("result for id %d, want %d", res.ID, id)
	}
	return res
}

func (s *stub) mustInitialize(model string, decoupled bool) {
	s.T.Helper()
	if res := s.initialize(model, decoupled); res.Error != nil {
		s.T.Fatalf("initialize %s: %s", model, res.Error.Message)
	}
}

func outputs(r ipc.Response) map[string]ipc.Tensor {
	m := map[string]ipc.Tensor{}
	for _, t := range r.Outputs {
		m[t.Name] = t
	}
	return m
}

func TestStubInitializeArgsAndFinalize(t *testing.T) {
	s := startStub(t, "add_sub_0_0")
	s.mustInitialize("add_sub", false)
	id := s.ID()
	s.Send(&ipc.IsReadyMsg{ID: id})
	if res := s.Expect(ipc.KindResult).(*ipc.ResultMsg); res.Error != nil || res.Value != true {
		t.Fatalf("is_ready = %+v", res)
	}
	s.Finalize()
	found := false
	for _, l := range s.Logs {
		found = found || (l.Message == "add_sub: finalize" && l.File == "model.py" && l.Level == "INFO")
	}
	if !found {
		t.Fatalf("finalize log line missing from %+v", s.Logs)
	}
}

func TestStubExecuteAddSub(t *testing.T) {
	s := startStub(t, "add_sub_0_0")
	s.mustInitialize("add_sub", false)
	a, b := []float32{1, 2, 3, 4}, []float32{0.5, 0.5, 1, 1}
	req := func(h uint64, x, y []float32, requested ...string) ipc.Request {
		return ipc.Request{Handle: h, CorrelationID: uint64(0), RequestedOutputs: requested, Inputs: []ipc.Tensor{
			s.Tensor("INPUT0", backendapi.TypeFP32, []int64{4}, ipctest.FP32(x...)),
			s.Tensor("INPUT1", backendapi.TypeFP32, []int64{4}, ipctest.FP32(y...)),
		}}
	}
	batch := s.ID()
	s.Send(&ipc.ExecuteMsg{BatchID: batch, Requests: []ipc.Request{req(1, a, b), req(2, b, a, "OUTPUT1")}})
	done := s.Expect(ipc.KindExecuteDone).(*ipc.ExecuteDoneMsg)
	if done.BatchID != batch || done.Error != nil || len(done.Responses) != 2 {
		t.Fatalf("execute done = %+v", done)
	}
	tests := []struct {
		name      string
		resp      ipc.Response
		handle    uint64
		wantNames []string
		want      map[string][]float32
	}{
		{"all outputs", done.Responses[0], 1, []string{"OUTPUT0", "OUTPUT1"},
			map[string][]float32{"OUTPUT0": {1.5, 2.5, 4, 5}, "OUTPUT1": {0.5, 1.5, 2, 3}}},
		{"requested subset", done.Responses[1], 2, []string{"OUTPUT1"},
			map[string][]float32{"OUTPUT1": {-0.5, -1.5, -2, -3}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.resp.Handle != tc.handle || tc.resp.Flags != ipc.FlagFinal || tc.resp.Error != nil {
				t.Fatalf("response = %+v", tc.resp)
			}
			outs := outputs(tc.resp)
			if len(outs) != len(tc.wantNames) {
				t.Fatalf("outputs %v, want %v", outs, tc.wantNames)
			}
			for name, want := range tc.want {
				o := outs[name]
				if o.Loc != ipc.LocInline || o.DataType != uint8(backendapi.TypeFP32) { // 16 bytes: in the message
					t.Fatalf("%s = %+v", name, o)
				}
				if got := ipctest.FP32s(s.Read(o)); !slices.Equal(got, want) {
					t.Errorf("%s = %v, want %v", name, got, want)
				}
			}
		})
	}
	for _, r := range done.Responses {
		s.Release(r)
	}
	s.StubInUse(0)
}

func TestStubBytesIdentity(t *testing.T) {
	s := startStub(t, "identity_all_0_0")
	s.mustInitialize("identity_all", false)
	items := []string{"hello", "", "\x00bin\xff", strings.Repeat("x", 1000)}
	s.Send(&ipc.ExecuteMsg{BatchID: s.ID(), Requests: []ipc.Request{{
		Handle: 5, CorrelationID: "sequence-7",
		Inputs: []ipc.Tensor{
			s.Tensor("INPUT_STRING", backendapi.TypeBytes, []int64{4}, ipctest.BYTES(items...)),
			s.Tensor("INPUT_BOOL", backendapi.TypeBool, []int64{2}, []byte{1, 0}),
		},
	}}})
	done := s.Expect(ipc.KindExecuteDone).(*ipc.ExecuteDoneMsg)
	if done.Error != nil {
		t.Fatalf("execute failed: %s", done.Error.Message)
	}
	outs := outputs(done.Responses[0])
	str := outs["OUTPUT_STRING"]
	if str.DataType != uint8(backendapi.TypeBytes) || len(str.Shape) != 1 || str.Shape[0] != 4 {
		t.Fatalf("OUTPUT_STRING = %+v", str)
	}
	if got, want := s.Read(str), ipctest.BYTES(items...); !bytes.Equal(got, want) {
		t.Errorf("OUTPUT_STRING bytes = %q, want %q", got, want)
	}
	if got := s.Read(outs["OUTPUT_BOOL"]); !bytes.Equal(got, []byte{1, 0}) {
		t.Errorf("OUTPUT_BOOL = %v", got)
	}
}

func TestStubDecoupledRepeat(t *testing.T) {
	s := startStub(t, "repeat_decoupled_0_0")
	s.mustInitialize("repeat_decoupled", true)
	in := []int32{10, 20, 30}
	s.Send(&ipc.ExecuteMsg{BatchID: s.ID(), Requests: []ipc.Request{{
		Handle: 9, CorrelationID: uint64(0),
		Inputs: []ipc.Tensor{
			s.Tensor("IN", backendapi.TypeInt32, []int64{3}, ipctest.INT32(in...)),
			s.Tensor("DELAY", backendapi.TypeUint32, []int64{3}, make([]byte, 12)),
			s.Tensor("WAIT", backendapi.TypeUint32, []int64{1}, make([]byte, 4)),
		},
	}}})
	responses := s.Stream()
	if len(responses) != len(in)+1 {
		t.Fatalf("got %d responses, want %d plus the final flag", len(responses), len(in))
	}
	for i, r := range responses[:len(in)] {
		outs := outputs(r)
		idx := binary.LittleEndian.Uint32(s.Read(outs["IDX"]))
		out := int32(binary.LittleEndian.Uint32(s.Read(outs["OUT"])))
		if r.Handle != 9 || r.Flags != 0 || idx != uint32(i) || out != in[i] {
			t.Errorf("response %d: handle %d flags %d IDX %d OUT %d", i, r.Handle, r.Flags, idx, out)
		}
		s.Release(r)
	}
	if final := responses[len(in)]; final.Flags != ipc.FlagFinal || len(final.Outputs) != 0 || final.Error != nil {
		t.Errorf("final response = %+v", final)
	}
	s.StubInUse(0)
}

func TestStubErrors(t *testing.T) {
	tests := []struct {
		name     string
		model    string
		run      func(t *testing.T, s *stub) *ipc.Error
		wantCode backendapi.Code
		want     []string
	}{
		{
			name:  "initialize raises",
			model: "init_fails",
			run: func(t *testing.T, s *stub) *ipc.Error {
				return s.initialize("init_fails", false).Error
			},
			wantCode: backendapi.Internal,
			want:     []string{"ValueError: init_fails: initialize refuses to load this model (instance init_fails_0_0)", "init_fails/1/model.py", "check_resources"},
		},
		{
			name:  "execute raises",
			model: "execute_raises",
			run: func(t *testing.T, s *stub) *ipc.Error {
				s.mustInitialize("execute_raises", false)
				s.Send(&ipc.ExecuteMsg{BatchID: s.ID(), Requests: []ipc.Request{{Handle: 1, CorrelationID: uint64(0),
					Inputs: []ipc.Tensor{s.Tensor("INPUT0", backendapi.TypeFP32, []int64{1}, ipctest.FP32(1))}}}})
				done := s.Expect(ipc.KindExecuteDone).(*ipc.ExecuteDoneMsg)
				if len(done.Responses) != 0 {
					t.Errorf("failed batch carried %d responses", len(done.Responses))
				}
				return done.Error
			},
			wantCode: backendapi.Internal,
			want:     []string{"Failed to process the request(s) for model 'execute_raises_0_0', message: RuntimeError: execute_raises: failing a batch of 1 request(s) on purpose", "execute_raises/1/model.py"},
		},
		{
			name:  "per-response code",
			model: "error_codes",
			run: func(t *testing.T, s *stub) *ipc.Error {
				s.mustInitialize("error_codes", false)
				s.Send(&ipc.ExecuteMsg{BatchID: s.ID(), Requests: []ipc.Request{{Handle: 1, CorrelationID: uint64(0),
					ParametersJSON: `{"error_code": "UNAVAILABLE"}`}}})
				done := s.Expect(ipc.KindExecuteDone).(*ipc.ExecuteDoneMsg)
				if done.Error != nil || len(done.Responses) != 1 {
					t.Fatalf("execute done = %+v", done)
				}
				return done.Responses[0].Error
			},
			wantCode: backendapi.Unavailable,
			want:     []string{"error_codes: UNAVAILABLE"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := startStub(t, tc.model+"_0_0")
			e := tc.run(t, s)
			if e == nil {
				t.Fatal("no error")
			}
			if backendapi.Code(e.Code) != tc.wantCode {
				t.Errorf("code %v, want %v", backendapi.Code(e.Code), tc.wantCode)
			}
			for _, w := range tc.want {
				if !strings.Contains(e.Message, w) {
					t.Errorf("message %q lacks %q", e.Message, w)
				}
			}
		})
	}
}
