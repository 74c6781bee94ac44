package ensemble

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/backendapi/modelconfig"
	"github.com/stubvisor/stubvisor/supervisor/stubproc"
)

// These tests run the ensemble scheduler over models played by the test:
// each answers its request at once, on the caller's goroutine, with
// f(INPUT0) as OUTPUT0. Real stubs run the same steps in
// cmd/stubvisor/e2e_ensemble_test.go.

// fakeModel is a one-input, one-output FP32 model computing f.
type fakeModel struct {
	cfg *inferencepb.ModelConfig
	f   func(float32) float32
}

func (m *fakeModel) Config() *inferencepb.ModelConfig { return m.cfg }
func (m *fakeModel) Decoupled() bool                  { return false }
func (m *fakeModel) Abandon(pr *stubproc.Request, err error) {
	pr.Abandon()
	pr.Respond(nil, err, true)
}

func (m *fakeModel) Submit(ctx context.Context, req *backendapi.InferRequest, stream func(*backendapi.InferResponse, error, bool)) (*stubproc.Request, error) {
	pr := stubproc.NewRequest(ctx, req, 1, stream, true)
	in := req.Inputs[0]
	out := make([]byte, len(in.Data))
	for i := 0; i+4 <= len(in.Data); i += 4 {
		v := math.Float32frombits(binary.LittleEndian.Uint32(in.Data[i:]))
		binary.LittleEndian.PutUint32(out[i:], math.Float32bits(m.f(v)))
	}
	pr.Respond(&backendapi.InferResponse{ModelName: req.ModelName, Outputs: []backendapi.OutputTensor{
		{Name: "OUTPUT0", DataType: backendapi.TypeFP32, Shape: in.Shape, Data: out}}}, nil, true)
	return pr, nil
}

type fakeModels map[string]*fakeModel

func (ms fakeModels) Lookup(name string, _ int64) (Model, error) {
	if m, ok := ms[name]; ok {
		return m, nil
	}
	return nil, backendapi.Errorf(backendapi.NotFound, "Request for unknown model: '%s' is not found", name)
}

// endHost ends the ensemble's requests as a model version does, without
// statistics.
type endHost struct{}

func (endHost) End(pr *stubproc.Request, resp *backendapi.InferResponse, err error, final bool) {
	if taken, _ := pr.Respond(resp, err, final); !taken {
		resp.Release()
	}
}
func (endHost) Executed(int64, time.Duration) {}

func parse(t *testing.T, pbtxt string) *inferencepb.ModelConfig {
	t.Helper()
	cfg, err := modelconfig.Parse("config.pbtxt", []byte(pbtxt))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

const fp32Model = `name: "%s" backend: "python" max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]`

const chain = `name: "chain" platform: "ensemble" max_batch_size: 0
input [ { name: "IN", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "OUT", data_type: TYPE_FP32, dims: [ -1 ] } ]
ensemble_scheduling { step [
  { model_name: "inc" model_version: -1 input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "mid" } },
  { model_name: "%s" model_version: -1 input_map { key: "INPUT0" value: "mid" } output_map { key: "OUTPUT0" value: "OUT" } }
] }`

func models(t *testing.T) fakeModels {
	return fakeModels{
		"inc": {cfg: parse(t, strings.ReplaceAll(fp32Model, "%s", "inc")), f: func(v float32) float32 { return v + 1 }},
		"dbl": {cfg: parse(t, strings.ReplaceAll(fp32Model, "%s", "dbl")), f: func(v float32) float32 { return 2 * v }},
	}
}

func fp32(vs ...float32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func TestEnsembleRunsItsSteps(t *testing.T) {
	e, err := New(parse(t, strings.ReplaceAll(chain, "%s", "dbl")), 1, models(t), endHost{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(e.Models(), ","); got != "inc,dbl" || e.Decoupled() || len(e.Steps()) != 2 {
		t.Fatalf("models %q, decoupled %v, steps %+v", got, e.Decoupled(), e.Steps())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := &backendapi.InferRequest{ModelName: "chain", Inputs: []backendapi.InputTensor{
		{Name: "IN", DataType: backendapi.TypeFP32, Shape: []int64{3}, Data: fp32(1, 2, 3)}}}
	queued := 0
	req.Queued = func() { queued++ }
	pr := stubproc.NewRequest(ctx, req, 1, nil, false)
	if err := e.Enqueue(pr); err != nil {
		t.Fatal(err)
	}
	resp, err := pr.Wait()
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Release()
	// OUT = 2 * (IN + 1)
	if len(resp.Outputs) != 1 || resp.Outputs[0].Name != "OUT" || string(resp.Outputs[0].Data) != string(fp32(4, 6, 8)) || queued != 1 {
		t.Fatalf("outputs %+v, Queued called %d times", resp.Outputs, queued)
	}
}

func TestEnsembleRefusesAMissingModel(t *testing.T) {
	_, err := New(parse(t, strings.ReplaceAll(chain, "%s", "nope")), 1, models(t), endHost{})
	if !errors.Is(err, backendapi.InvalidArg) || backendapi.MessageOf(err) != "ensemble chain contains models that are not available or ambiguous: nope" {
		t.Fatalf("err = %v", err)
	}
}
