package supervisor

import (
	"context"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/backendapi/modelconfig"
	"github.com/stubvisor/stubvisor/supervisor/ensemble"
	"github.com/stubvisor/stubvisor/supervisor/sched"
	"github.com/stubvisor/stubvisor/supervisor/signature"
	"github.com/stubvisor/stubvisor/supervisor/stubproc"
)

// newEnsembleVersion prepares an ensemble version: no instances; its
// scheduler (package ensemble) runs each request through the steps.
func (s *Supervisor) newEnsembleVersion(cfg *inferencepb.ModelConfig, dir string, version int64) (*modelVersion, error) {
	mv := &modelVersion{sup: s, name: cfg.GetName(), version: version, dir: dir, kind: modelconfig.KindEnsemble}
	e, err := ensemble.New(cfg, version, ensembleModels{s}, mv)
	if err != nil {
		return nil, err
	}
	if e.Decoupled() && !cfg.GetModelTransactionPolicy().GetDecoupled() {
		// As in Triton, an ensemble with a decoupled step is decoupled.
		if cfg.ModelTransactionPolicy == nil {
			cfg.ModelTransactionPolicy = &inferencepb.ModelTransactionPolicy{}
		}
		cfg.ModelTransactionPolicy.Decoupled = true
	}
	js, err := modelconfig.ToJSON(cfg)
	if err != nil {
		return nil, err
	}
	mv.cfg, mv.configJSON, mv.decoupled, mv.sig = cfg, string(js), e.Decoupled(), signature.New(cfg)
	mv.scheduler, mv.steps, mv.composing = e, e.Steps(), e.Models()
	return mv, nil
}

// The ensemble is one more scheduler.
var _ sched.Scheduler = (*ensemble.Ensemble)(nil)

// ensembleModels is how an ensemble reaches its steps' models: by name,
// as every caller does.
type ensembleModels struct{ s *Supervisor }

func (m ensembleModels) Lookup(name string, version int64) (ensemble.Model, error) {
	mv, err := m.s.lookup(name, version)
	if err != nil {
		return nil, err
	}
	return mv, nil
}

// A model version is an ensemble.Model to the ensembles whose steps name
// it, and an ensemble's version is its ensemble.Host.

// Config implements ensemble.Model.
func (mv *modelVersion) Config() *inferencepb.ModelConfig { return mv.cfg }

// Decoupled implements ensemble.Model.
func (mv *modelVersion) Decoupled() bool { return mv.decoupled }

// Submit implements ensemble.Model: stream owns the responses it gets.
func (mv *modelVersion) Submit(ctx context.Context, req *backendapi.InferRequest, stream func(*backendapi.InferResponse, error, bool)) (*stubproc.Request, error) {
	return mv.submitTo(ctx, req, stream, true)
}

// Abandon implements ensemble.Model.
func (mv *modelVersion) Abandon(pr *stubproc.Request, err error) { mv.abandon(pr, err) }

// Executed implements ensemble.Host; a stub's execute is counted here too
// (instance.Executed).
func (mv *modelVersion) Executed(size int64, d time.Duration) {
	mv.stats.executionDone(size, 0, d, 0)
}
