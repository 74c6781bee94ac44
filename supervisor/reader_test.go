package supervisor

import (
	"context"
	"encoding/binary"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
	"github.com/stubvisor/stubvisor/supervisor/sched"
)

// The callers of requests read the stub's ring themselves (stubproc.Proc.read).
// These tests cover the moments when no caller is left to read.

// slowRequest asks batch_slow to sleep ms milliseconds.
func slowRequest(ms int32) *backendapi.InferRequest {
	return &backendapi.InferRequest{ModelName: "batch_slow", Inputs: []backendapi.InputTensor{{
		Name: "DELAY_MS", DataType: backendapi.TypeInt32, Shape: []int64{1, 1},
		Data: binary.LittleEndian.AppendUint32(nil, uint32(ms)),
	}}}
}

func TestAbandonedRequestsDoNotStallTheStub(t *testing.T) {
	s := newSupervisor(t, "batch_slow")
	// Fill both pipeline slots with executes whose callers give up long
	// before the stub answers: then nobody reads the ring.
	var wg sync.WaitGroup
	mv, _ := s.lookup("batch_slow", 0)
	for range sched.PipelineDepth(mv.cfg, len(mv.instances)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			if _, err := s.Infer(ctx, slowRequest(300)); backendapi.CodeOf(err) != backendapi.Cancelled {
				t.Errorf("abandoned request: %v, want CANCELLED", err)
			}
		}()
	}
	wg.Wait()
	// A request queued behind them must still be sent and answered once
	// the stub is done with the abandoned ones.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.Infer(ctx, slowRequest(1))
	if err != nil {
		t.Fatalf("request after abandoned ones: %v", err)
	}
	defer resp.Release()
	if len(resp.Outputs) != 1 || binary.LittleEndian.Uint32(resp.Outputs[0].Data) != 1 {
		t.Fatalf("outputs %+v", resp.Outputs)
	}
}

func TestLeaderThatGivesUpHandsOverTheRing(t *testing.T) {
	s := newSupervisor(t, "batch_slow")
	// The first caller leads while the stub sleeps, then gives up; the
	// second, whose request waits in the stub behind it, must take over
	// reading and get its answer.
	first := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := s.Infer(ctx, slowRequest(300))
		first <- err
	}()
	inStub := func() int {
		st, _ := s.Stubs(context.Background(), "batch_slow")
		return st[0].Stubs[0].InFlight
	}
	for deadline := time.Now().Add(10 * time.Second); inStub() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the first request never reached the stub")
		}
		time.Sleep(time.Millisecond) // polling a status, bounded above
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.Infer(ctx, slowRequest(2))
	if err != nil {
		t.Fatalf("second request: %v", err)
	}
	resp.Release()
	if err := <-first; backendapi.CodeOf(err) != backendapi.Cancelled {
		t.Fatalf("first request: %v, want CANCELLED", err)
	}
}

func TestStubLogsWhileNobodyWaits(t *testing.T) {
	logs := &ipctest.LockedBuffer{}
	s := logSupervisor(t, hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: logs}), "log_later")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.Infer(ctx, &backendapi.InferRequest{ModelName: "log_later", Inputs: []backendapi.InputTensor{{
		Name: "IN", DataType: backendapi.TypeInt32, Shape: []int64{1}, Data: binary.LittleEndian.AppendUint32(nil, 7)}}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Release()
	// The line is written after the answer, so only the watchdog's drain
	// can read it.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), "log_later: after 7"); {
		if time.Now().After(deadline) {
			t.Fatalf("the stub's late log line never appeared; log:\n%s", logs.String())
		}
		time.Sleep(5 * time.Millisecond) // polling the log, bounded above
	}
}
