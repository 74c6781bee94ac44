package python

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/modelconfig"
	"github.com/stubvisor/stubvisor/ipc"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
	"github.com/stubvisor/stubvisor/ipc/ipctest/fakesup"
)

func TestStubAutoComplete(t *testing.T) {
	s := startStub(t, "auto_complete")
	dir, cfgJSON := modelConfig(t, "auto_complete", modelconfig.Read)
	id := s.ID()
	s.Send(&ipc.AutoCompleteMsg{ID: id, Options: map[string]any{"model_file": filepath.Join(dir, "1", "model.py")}, ConfigJSON: cfgJSON})
	res := s.Expect(ipc.KindResult).(*ipc.ResultMsg)
	if res.Error != nil {
		t.Fatalf("auto-complete failed: %s", res.Error.Message)
	}
	text, ok := res.Value.(string)
	if !ok {
		t.Fatalf("auto-complete value %T, want the config JSON", res.Value)
	}
	completed, err := modelconfig.FromJSON([]byte(text))
	if err != nil {
		t.Fatalf("completed config does not parse: %v\n%s", err, text)
	}
	if len(completed.Input) != 1 || completed.Input[0].Name != "INPUT0" || len(completed.Output) != 1 ||
		completed.MaxBatchSize != 8 || completed.GetDynamicBatching() == nil {
		t.Fatalf("completed config = %v", completed)
	}
}

func TestStubExitsWhenRegionMarkedDead(t *testing.T) {
	s := startStub(t, "identity_fp32_0_0")
	s.mustInitialize("identity_fp32", false)
	s.Conn.MarkDead()
	if code := s.ExitCode(); code != 1 {
		t.Fatalf("stub exit status %d, want 1", code)
	}
}

// TestTestModelsConfigs checks that every Python model of the shared
// repository has a configuration the server accepts.
func TestTestModelsConfigs(t *testing.T) {
	entries, err := os.ReadDir(modelsDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		dir := filepath.Join(modelsDir, e.Name())
		if _, err := os.Stat(filepath.Join(dir, "1", "model.py")); err != nil {
			continue
		}
		t.Run(e.Name(), func(t *testing.T) {
			cfg, err := modelconfig.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			if e.Name() == "auto_complete" {
				return // completed by its model.py, not valid before
			}
			if err := modelconfig.Validate(cfg); err != nil {
				t.Fatal(err)
			}
			if _, err := json.Marshal(cfg); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// BenchmarkStubIdentityFP32 measures one execute round trip, supervisor ->
// stub -> identity model -> supervisor, for a 16xFP32 input, including the
// (inline) output. Its p50 target is 20 us (docs: performance).
func BenchmarkStubIdentityFP32(b *testing.B) {
	s := startStub(b, "identity_fp32_0_0")
	s.mustInitialize("identity_fp32", false)
	in := s.Tensor("INPUT0", backendapi.TypeFP32, []int64{16}, ipctest.FP32(make([]float32, 16)...))
	req := []ipc.Request{{Handle: 1, CorrelationID: uint64(0), Inputs: []ipc.Tensor{in}}}
	round := func(i int) {
		if err := s.Conn.Send(&ipc.ExecuteMsg{BatchID: uint64(i), Requests: req}); err != nil {
			b.Fatal(err)
		}
		m, err := s.Conn.Recv(time.Now().Add(fakesup.WaitBound))
		if err != nil {
			b.Fatal(err)
		}
		done, ok := m.(*ipc.ExecuteDoneMsg)
		if !ok || done.Error != nil || len(done.Responses) != 1 {
			b.Fatalf("unexpected %+v", m)
		}
	}
	for i := range 1000 { // warm up the interpreter's caches
		round(i)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		round(i)
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-us")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-us")
}
