package ensemble

import (
	"context"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/supervisor/stubproc"
)

// Models finds the composing models by name and version (0: the latest).
type Models interface {
	Lookup(name string, version int64) (Model, error)
}

// Model is a composing model, reached as any caller reaches a model.
type Model interface {
	Config() *inferencepb.ModelConfig
	Decoupled() bool
	// Submit validates req and queues it; stream gets, and owns, every
	// response (a step's outputs stay in its stub's arena until the steps
	// that read them are done).
	Submit(ctx context.Context, req *backendapi.InferRequest, stream func(*backendapi.InferResponse, error, bool)) (*stubproc.Request, error)
	// Abandon ends a request whose caller gave up (err says why).
	Abandon(pr *stubproc.Request, err error)
}

// Host is the ensemble's own model version: where its requests end.
type Host interface {
	// End hands the request a response or ends it (final), recording its
	// statistics first, as any request of the model version ends.
	End(pr *stubproc.Request, resp *backendapi.InferResponse, err error, final bool)
	// Executed records one run of the ensemble over size batch elements
	// that took d.
	Executed(size int64, d time.Duration)
}
