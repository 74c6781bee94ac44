package modelconfig

import (
	"sort"

	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

// KindEnsemble is the Kind of an ensemble: platform "ensemble" (or backend
// "ensemble"), whose ensemble_scheduling steps run other models.
const KindEnsemble = "ensemble"

// IsEnsemble reports whether cfg describes an ensemble.
func IsEnsemble(cfg *inferencepb.ModelConfig) bool {
	return cfg.GetPlatform() == KindEnsemble || cfg.GetBackend() == KindEnsemble
}

// validateEnsemble checks what of an ensemble can be checked without its
// composing models, with Triton's texts: the settings an ensemble may not
// have, every step's fields, and the data flow: every tensor a step
// consumes is produced (an ensemble input or a step output, written once),
// every ensemble output is written, and no tensor is left unused. A cycle
// leaves its tensors never ready, so it fails the flow check.
func validateEnsemble(cfg *inferencepb.ModelConfig) error {
	name := cfg.GetName()
	if cfg.GetEnsembleScheduling() == nil {
		return invalidf("ensemble scheduling must be set for ensemble %s whose platform is ensemble", name)
	}
	if len(cfg.GetInstanceGroup()) != 0 {
		return invalidf("instance group should not be specified for ensemble '%s'", name)
	}
	if cfg.GetOptimization() != nil {
		return invalidf("optimization should not be specified for ensemble '%s'", name)
	}
	if len(cfg.GetModelWarmup()) != 0 {
		return invalidf("model_warmup can not be specified for ensemble '%s'", name)
	}
	if err := validateBatchAndIO(cfg); err != nil {
		return err
	}
	steps := cfg.GetEnsembleScheduling().GetStep()
	if len(steps) == 0 {
		return invalidf("must specify 'step' for ensemble '%s'", name)
	}
	g, err := ensembleGraph(name, steps)
	if err != nil {
		return err
	}
	return g.checkFlow(cfg)
}

// ensTensor is one ensemble tensor in the data-flow check.
type ensTensor struct {
	written bool // some step's output map writes it
	ready   bool
	// prev are the tensors the step that writes this one reads; next the
	// tensors written by the steps that read this one.
	prev, next []string
}

type ensGraph map[string]*ensTensor

func (g ensGraph) get(name string) *ensTensor {
	t := g[name]
	if t == nil {
		t = &ensTensor{}
		g[name] = t
	}
	return t
}

func ensembleGraph(name string, steps []*inferencepb.ModelEnsembling_Step) (ensGraph, error) {
	g := ensGraph{}
	for _, st := range steps {
		if st.GetModelName() == "" {
			return nil, invalidf("must specify 'model_name' in step of ensemble '%s'", name)
		}
		if len(st.GetInputMap()) == 0 {
			return nil, invalidf("must specify 'input_map' in step of ensemble '%s'", name)
		}
		if len(st.GetOutputMap()) == 0 {
			return nil, invalidf("must specify 'output_map' in step of ensemble '%s'", name)
		}
		var outs []string
		for _, k := range sortedKeys(st.GetOutputMap()) {
			tensor := st.GetOutputMap()[k]
			t := g.get(tensor)
			if t.written {
				return nil, invalidf("ensemble tensor '%s' can appear in an output map only once for ensemble '%s' step", tensor, name)
			}
			t.written = true
			outs = append(outs, tensor)
		}
		for _, k := range sortedKeys(st.GetInputMap()) {
			tensor := st.GetInputMap()[k]
			in := g.get(tensor)
			for _, o := range outs {
				g[o].prev = append(g[o].prev, tensor)
				in.next = append(in.next, o)
			}
		}
	}
	return g, nil
}

// checkFlow marks the tensors that become ready from the ensemble inputs
// and reports the first tensor that is not written or not used.
func (g ensGraph) checkFlow(cfg *inferencepb.ModelConfig) error {
	name := cfg.GetName()
	var queue []string
	for _, in := range cfg.GetInput() {
		t := g[in.GetName()]
		if t == nil {
			return invalidf("ensemble input '%s' for ensemble %s' is not used", in.GetName(), name)
		}
		t.ready = true
		queue = append(queue, in.GetName())
	}
	for len(queue) > 0 {
		cur := g[queue[0]]
		queue = queue[1:]
		for _, n := range cur.next {
			nt := g[n]
			if nt.ready {
				continue
			}
			ready := true
			for _, p := range nt.prev {
				if !g[p].ready {
					ready = false
					break
				}
			}
			if ready {
				nt.ready = true
				queue = append(queue, n)
			}
		}
	}
	outputs := map[string]bool{}
	for _, out := range cfg.GetOutput() {
		t := g[out.GetName()]
		if t == nil {
			return invalidf("ensemble output '%s' for ensemble %s' is not used", out.GetName(), name)
		}
		if !t.ready {
			return invalidf("output '%s' for ensemble '%s' is not written", out.GetName(), name)
		}
		outputs[out.GetName()] = true
	}
	names := make([]string, 0, len(g))
	for n := range g {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if outputs[n] {
			continue
		}
		if t := g[n]; !t.ready || len(t.next) == 0 {
			return invalidf("ensemble tensor '%s' is unused in ensemble '%s'", n, name)
		}
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
