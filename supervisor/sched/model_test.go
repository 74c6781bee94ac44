package sched

import (
	"sync"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/supervisor/stubproc"
)

// testModel plays a model version without stubs: the test takes batches
// from its queue, and Finish answers as the model version does, without
// statistics.
type testModel struct {
	queue  chan *stubproc.Batch
	active sync.WaitGroup
}

func (m *testModel) Take() Runner                { return nil }
func (m *testModel) Queue() chan *stubproc.Batch { return m.queue }
func (m *testModel) Instances() []Instance       { return nil }
func (m *testModel) schedModel(maxBatch int64) *model {
	return &model{name: "m", version: 1, maxBatch: maxBatch, pipelineDepth: batchPipelineDepth, queue: m.queue, d: m}
}

func (m *testModel) Finish(pr *stubproc.Request, resp *backendapi.InferResponse, err error, final bool) {
	if pr.Filler() {
		resp.Release()
		pr.Respond(nil, nil, true)
		return
	}
	taken, ended := pr.Respond(resp, err, final)
	if !taken {
		resp.Release()
	}
	if ended {
		m.active.Done()
	}
}
