package ensemble

import (
	"maps"
	"slices"
	"strconv"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

// Ensemble is the scheduler of an ensemble model version, built at load
// from ensemble_scheduling: which step reads and writes which ensemble
// tensor. Steps name their models, not model versions, and look them up
// on every request, so a composing model reloaded under a loaded ensemble
// serves the next request.
type Ensemble struct {
	name      string
	version   int64
	decoupled bool
	models    Models
	host      Host
	steps     []*ensStep
	// producer is the step writing each step-output tensor.
	producer map[string]*ensStep
	// consumers are the steps reading each tensor.
	consumers map[string][]*ensStep
	inputs    map[string]bool // the ensemble's inputs
	outputs   []string        // the ensemble's outputs, in config order
}

// ensStep is one step: a model and its tensor maps.
type ensStep struct {
	idx     int
	model   string
	version int64 // 0: the latest
	// in maps each model input to the ensemble tensor it reads; out maps
	// each model output to the tensor it writes (sorted by model name).
	in, out []ensMap
}

type ensMap struct{ model, tensor string }

// tensorOf returns the ensemble tensor a model output writes.
func (st *ensStep) tensorOf(output string) (string, bool) {
	for _, m := range st.out {
		if m.model == output {
			return m.tensor, true
		}
	}
	return "", false
}

// New builds the schedule of a validated ensemble config and checks it
// against the composing models, which must be loaded: every mapped tensor
// exists in the step's model, every required input is mapped, each
// ensemble tensor has one data type, and no step model allows a smaller
// batch than the ensemble. The texts are Triton's. An ensemble with a
// decoupled step is decoupled (Decoupled). Its requests end through host.
func New(cfg *inferencepb.ModelConfig, version int64, models Models, host Host) (e *Ensemble, err error) {
	decoupled := false
	name := cfg.GetName()
	e = &Ensemble{name: name, version: version, models: models, host: host, producer: map[string]*ensStep{}, consumers: map[string][]*ensStep{}, inputs: map[string]bool{}}
	types := map[string]struct {
		dt    inferencepb.DataType
		model string
	}{}
	setType := func(tensor string, dt inferencepb.DataType, model string) error {
		if prev, ok := types[tensor]; ok && prev.dt != dt {
			return backendapi.Errorf(backendapi.InvalidArg, "in ensemble %s, ensemble tensor %s: inconsistent data type: %s is inferred from model %s while %s is inferred from model %s",
				name, tensor, prev.dt, prev.model, dt, model)
		} else if !ok {
			types[tensor] = struct {
				dt    inferencepb.DataType
				model string
			}{dt, model}
		}
		return nil
	}
	// mapStep resolves one side of a step's map (model tensor to ensemble
	// tensor) in name order: each model tensor must be one of the model's
	// (dtypes), and the ensemble tensor takes its data type. missing is
	// Triton's wording for a model tensor that does not exist.
	mapStep := func(st *ensStep, m map[string]string, dtypes map[string]inferencepb.DataType, missing string) ([]ensMap, error) {
		var out []ensMap
		for _, k := range slices.Sorted(maps.Keys(m)) {
			dt, ok := dtypes[k]
			if !ok {
				return nil, backendapi.Errorf(backendapi.InvalidArg, "in ensemble %s, ensemble tensor %s %s %s in model %s", name, m[k], missing, k, st.model)
			}
			if err := setType(m[k], dt, st.model); err != nil {
				return nil, err
			}
			out = append(out, ensMap{model: k, tensor: m[k]})
		}
		return out, nil
	}
	for _, in := range cfg.GetInput() {
		e.inputs[in.GetName()] = true
		types[in.GetName()] = struct {
			dt    inferencepb.DataType
			model string
		}{in.GetDataType(), name}
	}
	for i, sc := range cfg.GetEnsembleScheduling().GetStep() {
		st := &ensStep{idx: i, model: sc.GetModelName(), version: sc.GetModelVersion()}
		if st.version < 0 {
			st.version = 0
		}
		m, err := models.Lookup(st.model, st.version)
		if err != nil {
			return nil, backendapi.Errorf(backendapi.InvalidArg, "ensemble %s contains models that are not available or ambiguous: %s", name, st.model)
		}
		mcfg := m.Config()
		decoupled = decoupled || m.Decoupled()
		if mb := cfg.GetMaxBatchSize(); mb > mcfg.GetMaxBatchSize() {
			return nil, backendapi.Errorf(backendapi.InvalidArg, "ensemble %s allows maximum batch size %d, but it contains model %s which only allows maximum batch size to be %d",
				name, mb, st.model, mcfg.GetMaxBatchSize())
		}
		inputs := map[string]inferencepb.DataType{}
		for _, in := range mcfg.GetInput() {
			inputs[in.GetName()] = in.GetDataType()
		}
		outputs := map[string]inferencepb.DataType{}
		for _, out := range mcfg.GetOutput() {
			outputs[out.GetName()] = out.GetDataType()
		}
		if st.in, err = mapStep(st, sc.GetInputMap(), inputs, "is mapping to non-existing input"); err != nil {
			return nil, err
		}
		for _, m := range st.in {
			e.consumers[m.tensor] = append(e.consumers[m.tensor], st)
		}
		for _, in := range mcfg.GetInput() {
			if _, mapped := sc.GetInputMap()[in.GetName()]; !mapped && !in.GetOptional() && !isControlInput(mcfg, in.GetName()) {
				return nil, backendapi.Errorf(backendapi.InvalidArg, "in ensemble %s, input %s in model %s is not mapped to any ensemble tensors", name, in.GetName(), st.model)
			}
		}
		if st.out, err = mapStep(st, sc.GetOutputMap(), outputs, "is mapped from non-existing output"); err != nil {
			return nil, err
		}
		for _, m := range st.out {
			e.producer[m.tensor] = st
		}
		e.steps = append(e.steps, st)
	}
	for _, out := range cfg.GetOutput() {
		e.outputs = append(e.outputs, out.GetName())
		if err := setType(out.GetName(), out.GetDataType(), name); err != nil {
			return nil, err
		}
	}
	e.decoupled = decoupled || cfg.GetModelTransactionPolicy().GetDecoupled()
	return e, nil
}

// Decoupled reports whether the ensemble is decoupled: its config says
// so, or one of its steps' models is.
func (e *Ensemble) Decoupled() bool { return e.decoupled }

// Models lists the models the steps name, in step order.
func (e *Ensemble) Models() []string {
	var out []string
	for _, st := range e.steps {
		if !slices.Contains(out, st.model) {
			out = append(out, st.model)
		}
	}
	return out
}

// FailQueued implements sched.Scheduler: nothing waits in an ensemble;
// its steps wait in their own models' queues.
func (e *Ensemble) FailQueued(error) {}

// Ready implements sched.Scheduler: an ensemble is always ready, its
// steps answer for their models.
func (e *Ensemble) Ready() bool { return true }

// Stop implements sched.Scheduler.
func (e *Ensemble) Stop() {}

// isControlInput reports whether a model input is a sequence control the
// sequence batcher fills in.
func isControlInput(cfg *inferencepb.ModelConfig, name string) bool {
	for _, c := range cfg.GetSequenceBatching().GetControlInput() {
		if c.GetName() == name {
			return true
		}
	}
	return false
}

// Dependencies lists the models an ensemble config's steps name.
func Dependencies(cfg *inferencepb.ModelConfig) []string {
	seen := map[string]bool{}
	var out []string
	for _, st := range cfg.GetEnsembleScheduling().GetStep() {
		if n := st.GetModelName(); n != "" && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// Steps describes the ensemble's steps for the status page.
func (e *Ensemble) Steps() []backendapi.EnsembleStep {
	out := make([]backendapi.EnsembleStep, 0, len(e.steps))
	for _, st := range e.steps {
		es := backendapi.EnsembleStep{Model: st.model, Version: "latest"}
		if st.version > 0 {
			es.Version = strconv.FormatInt(st.version, 10)
		}
		for _, m := range st.in {
			es.Inputs = append(es.Inputs, m.tensor+" -> "+m.model)
		}
		for _, m := range st.out {
			es.Outputs = append(es.Outputs, m.model+" -> "+m.tensor)
		}
		out = append(out, es)
	}
	return out
}
