package stub

import (
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/ipc"
)

func init() { roles["waitready"] = &waitReadyModel{executed: make(chan struct{})} }

// waitReadyModel's IsReady answers true only once an Execute has run
// (false after 3 s): it can answer true only if IsReady runs
// beside Execute rather than before it.
type waitReadyModel struct {
	echoModel
	executed chan struct{}
}

func (m *waitReadyModel) Execute(reqs []*ModelRequest) []ModelResponse {
	select {
	case <-m.executed:
	default:
		close(m.executed)
	}
	return m.echoModel.Execute(reqs)
}

func (m *waitReadyModel) IsReady() bool {
	select {
	case <-m.executed:
		return true
	case <-time.After(3 * time.Second):
		return false
	}
}

// TestIsReadyBesideExecute checks that a model's slow IsReady holds up no
// Execute, as Triton runs is_ready() beside execute.
func TestIsReadyBesideExecute(t *testing.T) {
	p := startStub(t, "waitready")
	p.initialize(false)
	readyID := p.ID()
	p.Send(&ipc.IsReadyMsg{ID: readyID})
	in := p.input("IN0", 1)
	p.Send(&ipc.ExecuteMsg{BatchID: 1, Requests: []ipc.Request{{Handle: 1, Inputs: []ipc.Tensor{in}, ParametersJSON: "{}"}}})
	var done *ipc.ExecuteDoneMsg
	var ready *ipc.ResultMsg
	for done == nil || ready == nil {
		switch m := p.Recv().(type) {
		case *ipc.ExecuteDoneMsg:
			done = m
		case *ipc.ResultMsg:
			if m.ID != readyID {
				t.Fatalf("unexpected result %+v", m)
			}
			ready = m
		default:
			t.Fatalf("unexpected %T", m)
		}
	}
	if done.Error != nil || len(done.Responses) != 1 || ready.Value != true {
		t.Fatalf("ExecuteDone %+v, IsReady %v: want a response and true", done, ready.Value)
	}
	p.Release(done.Responses...)
}
