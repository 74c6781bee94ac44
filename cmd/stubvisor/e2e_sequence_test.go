package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// inferResult is one HTTP inference as a goroutine saw it; goroutines
// other than the test's own must not call t.Fatal, so errors travel back.
type inferResult struct {
	code int
	body []byte
	err  error
}

var inferClient = &http.Client{Timeout: 60 * time.Second}

// postInfer sends an inference request for model and returns what came
// back. It is safe to call from any goroutine.
func postInfer(base, model string, req any) inferResult {
	b, err := json.Marshal(req)
	if err != nil {
		return inferResult{err: err}
	}
	resp, err := inferClient.Post(base+"/v2/models/"+model+"/infer", "application/json", bytes.NewReader(b))
	if err != nil {
		return inferResult{err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return inferResult{code: resp.StatusCode, body: body, err: err}
}

// errorText returns the "error" field of an error response body.
func errorText(body []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	return e.Error
}

// seen is the record seq_accumulate returns in SEEN: the request as the
// model saw it.
type seen struct {
	Instance      string  `json:"instance"`
	Start         float64 `json:"start"`
	End           float64 `json:"end"`
	Ready         bool    `json:"ready"`
	CorrID        idText  `json:"corrid"`
	CorrelationID idText  `json:"correlation_id"`
	Flags         int     `json:"flags"`
	N             int     `json:"n"`
	Sum           int     `json:"sum"`
	Unstarted     bool    `json:"unstarted"`
	Batch         int     `json:"batch"`
	Slot          int     `json:"slot"`
	NotReady      int     `json:"not_ready"`
}

// idText is a correlation id as JSON carried it, a number or a string,
// in its exact text.
type idText string

func (x *idText) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*x = idText(s)
		return nil
	}
	*x = idText(b)
	return nil
}

// seqStep sends one request of a sequence to a seq_* model and decodes
// the model's SEEN record and OUTPUT.
func seqStep(base, model string, id any, value int, start, end bool) (seen, int, error) {
	shape := []int{1, 1}
	if model == "seq_string" {
		shape = []int{1}
	}
	params := map[string]any{"sequence_id": id}
	if start {
		params["sequence_start"] = true
	}
	if end {
		params["sequence_end"] = true
	}
	r := postInfer(base, model, map[string]any{
		"parameters": params,
		"inputs":     []map[string]any{{"name": "INPUT", "shape": shape, "datatype": "INT32", "data": []int{value}}},
	})
	if r.err != nil {
		return seen{}, 0, r.err
	}
	if r.code != http.StatusOK {
		return seen{}, 0, fmt.Errorf("status %d: %s", r.code, r.body)
	}
	var resp struct {
		Outputs []struct {
			Name string            `json:"name"`
			Data []json.RawMessage `json:"data"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(r.body, &resp); err != nil {
		return seen{}, 0, fmt.Errorf("%v: %s", err, r.body)
	}
	var sv seen
	out := 0
	for _, o := range resp.Outputs {
		if len(o.Data) != 1 {
			return seen{}, 0, fmt.Errorf("output %s has %d elements: %s", o.Name, len(o.Data), r.body)
		}
		switch o.Name {
		case "OUTPUT":
			if err := json.Unmarshal(o.Data[0], &out); err != nil {
				return seen{}, 0, err
			}
		case "SEEN":
			var text string
			if err := json.Unmarshal(o.Data[0], &text); err != nil {
				return seen{}, 0, err
			}
			if err := json.Unmarshal([]byte(text), &sv); err != nil {
				return seen{}, 0, fmt.Errorf("SEEN %q: %v", text, err)
			}
		}
	}
	return sv, out, nil
}

// runSequence sends length requests of one sequence in order and checks
// what the model saw at every step: its own running sum, the control
// values, flags and correlation id, and always the same instance. It
// returns that instance.
func runSequence(base, model string, id any, length int) (string, error) {
	want := fmt.Sprint(id)
	instance, sum := "", 0
	for k := 1; k <= length; k++ {
		value := k * 3
		start, end := k == 1, k == length
		sv, out, err := seqStep(base, model, id, value, start, end)
		if err != nil {
			return "", fmt.Errorf("sequence %v step %d: %w", id, k, err)
		}
		sum += value
		flags := 0
		if start {
			flags |= 1
		}
		if end {
			flags |= 2
		}
		switch {
		case instance != "" && sv.Instance != instance:
			return "", fmt.Errorf("sequence %v step %d ran on %s, earlier steps on %s", id, k, sv.Instance, instance)
		case sv.N != k || sv.Sum != sum || out != sum || sv.Unstarted:
			return "", fmt.Errorf("sequence %v step %d: model saw n=%d sum=%d (output %d, unstarted %v), want n=%d sum=%d", id, k, sv.N, sv.Sum, out, sv.Unstarted, k, sum)
		case (sv.Start == 1) != start || (sv.End == 1) != end || !sv.Ready || sv.Flags != flags:
			return "", fmt.Errorf("sequence %v step %d: controls START=%v END=%v READY=%v flags=%d, want START=%v END=%v READY=true flags=%d", id, k, sv.Start, sv.End, sv.Ready, sv.Flags, start, end, flags)
		case string(sv.CorrID) != want || string(sv.CorrelationID) != want:
			return "", fmt.Errorf("sequence %v step %d: CORRID=%s correlation_id()=%s", id, k, sv.CorrID, sv.CorrelationID)
		case model == "seq_string" && sv.Batch != 1:
			return "", fmt.Errorf("sequence %v step %d: an execute of %d requests for a model with max_batch_size 0", id, k, sv.Batch)
		}
		instance = sv.Instance
	}
	return instance, nil
}

// runSequences runs every sequence concurrently and returns the instances
// they ran on.
func runSequences(t *testing.T, base, model string, ids []any) map[string]int {
	t.Helper()
	var wg sync.WaitGroup
	insts := make([]string, len(ids))
	errs := make([]error, len(ids))
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			insts[i], errs[i] = runSequence(base, model, id, 4+i%4)
		}()
	}
	wg.Wait()
	used := map[string]int{}
	for i := range ids {
		if errs[i] != nil {
			t.Error(errs[i])
			continue
		}
		used[insts[i]]++
	}
	return used
}

func TestSequenceBatcher(t *testing.T) {
	slow(t)
	ipctest.RequirePython(t)
	s := startServer(t, copyRepo(t, "seq_accumulate", "seq_string"))

	t.Run("interleaved uint64 ids over two instances", func(t *testing.T) {
		// 12 sequences at once for 2 instances of 2 slots: most wait in
		// the backlog for a slot, and the largest ids need all 64 bits.
		var ids []any
		for i := range 12 {
			if i%2 == 0 {
				ids = append(ids, uint64(1000+i))
			} else {
				ids = append(ids, uint64(18446744073709551000)+uint64(i))
			}
		}
		used := runSequences(t, s.HTTP, "seq_accumulate", ids)
		if len(used) != 2 {
			t.Errorf("sequences ran on instances %v, want both instances used", used)
		}
	})

	t.Run("interleaved string ids over three instances", func(t *testing.T) {
		var ids []any
		for i := range 9 {
			ids = append(ids, fmt.Sprintf("e333c95a-07fc-42d2-ab16-%012d", i))
		}
		used := runSequences(t, s.HTTP, "seq_string", ids)
		if len(used) < 2 {
			t.Errorf("sequences ran on instances %v, want them spread", used)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		one := []map[string]any{{"name": "INPUT", "shape": []int{1, 1}, "datatype": "INT32", "data": []int{1}}}
		if _, _, err := seqStep(s.HTTP, "seq_accumulate", 77, 1, true, true); err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name  string
			model string
			req   map[string]any
			code  int
			text  string // the error must start with it
		}{
			{"no START on a new sequence", "seq_accumulate",
				map[string]any{"parameters": map[string]any{"sequence_id": 4242}, "inputs": one},
				400, "inference request for sequence 4242 to model 'seq_accumulate' must specify the START flag on the first request of the sequence"},
			{"request after END", "seq_accumulate",
				map[string]any{"parameters": map[string]any{"sequence_id": 77}, "inputs": one},
				400, "inference request for sequence 77 to model 'seq_accumulate' must specify the START flag on the first request of the sequence; the sequence ended"},
			{"no correlation id", "seq_accumulate",
				map[string]any{"inputs": one},
				400, "inference request to model 'seq_accumulate' must specify a non-zero or non-empty correlation ID"},
			{"batch of two", "seq_accumulate",
				map[string]any{"parameters": map[string]any{"sequence_id": 5, "sequence_start": true},
					"inputs": []map[string]any{{"name": "INPUT", "shape": []int{2, 1}, "datatype": "INT32", "data": []int{1, 2}}}},
				400, "inference request to model 'seq_accumulate' must specify batch-size 1 due to requirements of sequence batcher"},
			{"string id for a UINT64 CORRID", "seq_accumulate",
				map[string]any{"parameters": map[string]any{"sequence_id": "abc", "sequence_start": true}, "inputs": one},
				400, "inference request to model 'seq_accumulate': string correlation ID 'abc' given"},
			{"client sends a control input", "seq_accumulate",
				map[string]any{"parameters": map[string]any{"sequence_id": 6, "sequence_start": true},
					"inputs": append([]map[string]any{{"name": "START", "shape": []int{1, 1}, "datatype": "INT32", "data": []int{1}}}, one...)},
				400, "unexpected inference input 'START' for model 'seq_accumulate'"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				r := postInfer(s.HTTP, tc.model, tc.req)
				if r.err != nil {
					t.Fatal(r.err)
				}
				if got := errorText(r.body); r.code != tc.code || !strings.HasPrefix(got, tc.text) {
					t.Errorf("got %d %q, want %d starting with %q", r.code, got, tc.code, tc.text)
				}
			})
		}
	})

	t.Run("idle sequence is reclaimed", func(t *testing.T) {
		if _, _, err := seqStep(s.HTTP, "seq_string", "idle-1", 1, true, false); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the reclaim of sequence idle-1", func() bool {
			return strings.Contains(s.Log(), "sequence reclaimed after being idle: model=seq_string sequence=idle-1")
		})
		_, _, err := seqStep(s.HTTP, "seq_string", "idle-1", 1, false, false)
		want := "inference request for sequence idle-1 to model 'seq_string' must specify the START flag on the first request of the sequence; the sequence was reclaimed after being idle for longer than max_sequence_idle_microseconds (1000000)"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("request after the reclaim: %v, want %q", err, want)
		}
		// The id is free again for a new sequence.
		if _, err := runSequence(s.HTTP, "seq_string", "idle-1", 2); err != nil {
			t.Error(err)
		}
	})

	t.Run("sequence ends when its stub dies", func(t *testing.T) {
		sv, _, err := seqStep(s.HTTP, "seq_accumulate", 9090, 1, true, false)
		if err != nil {
			t.Fatal(err)
		}
		pid, restarts := stubOf(t, s, "seq_accumulate", sv.Instance)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "the stub's restart", func() bool {
			p, r := stubOf(t, s, "seq_accumulate", sv.Instance)
			return r > restarts && p != 0 && p != pid
		})
		_, _, err = seqStep(s.HTTP, "seq_accumulate", 9090, 2, false, false)
		want := "inference request for sequence 9090 to model 'seq_accumulate' "
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "died") {
			t.Errorf("request after the stub died: %v, want an error saying the sequence's stub died", err)
		}
		// Starting over works, on fresh state.
		if _, err := runSequence(s.HTTP, "seq_accumulate", 9090, 3); err != nil {
			t.Error(err)
		}
	})
}

// seqModelConfig is a config for seq_accumulate's model.py with the
// given batching strategy and instance count.
func seqModelConfig(name string, maxBatch int, strategy string, count int) string {
	return fmt.Sprintf(`name: "%s"
backend: "python"
max_batch_size: %d
input [{ name: "INPUT", data_type: TYPE_INT32, dims: [ 1 ] }]
output [
  { name: "OUTPUT", data_type: TYPE_INT32, dims: [ 1 ] },
  { name: "SEEN", data_type: TYPE_STRING, dims: [ 1 ] }
]
sequence_batching {
  %s
  control_input [
    { name: "START", control [{ kind: CONTROL_SEQUENCE_START, int32_false_true: [ 0, 1 ] }] },
    { name: "END", control [{ kind: CONTROL_SEQUENCE_END, int32_false_true: [ 0, 1 ] }] },
    { name: "READY", control [{ kind: CONTROL_SEQUENCE_READY, int32_false_true: [ 0, 1 ] }] },
    { name: "CORRID", control [{ kind: CONTROL_SEQUENCE_CORRID, data_type: TYPE_UINT64 }] }
  ]
}
instance_group [{ kind: KIND_CPU, count: %d }]
`, name, maxBatch, strategy, count)
}

// TestSequenceBatchForming checks how each strategy forms batches: direct
// keeps batch position = slot (filling gaps with not-ready requests) and
// waits for minimum_slot_utilization up to its queue delay; oldest sends
// at once when a preferred size is reached.
func TestSequenceBatchForming(t *testing.T) {
	ipctest.RequirePython(t)
	model, err := os.ReadFile(filepath.Join("..", "..", "testdata", "models", "seq_accumulate", "1", "model.py"))
	if err != nil {
		t.Fatal(err)
	}
	const delay = 500 * time.Millisecond
	repo := t.TempDir()
	httpWriteModel(t, repo, "seq_slots", seqModelConfig("seq_slots", 2,
		fmt.Sprintf("direct { max_queue_delay_microseconds: %d minimum_slot_utilization: 1.0 }", delay.Microseconds()), 1),
		map[string]string{"model.py": string(model)})
	httpWriteModel(t, repo, "seq_oldest", seqModelConfig("seq_oldest", 4,
		"oldest { max_candidate_sequences: 4 preferred_batch_size: [ 3 ] max_queue_delay_microseconds: 60000000 }", 1),
		map[string]string{"model.py": string(model)})
	s := startServer(t, repo)

	// steps sends one request of each sequence at once and returns what
	// the model saw, in the order of ids.
	steps := func(model string, ids []uint64, start, end bool) []seen {
		t.Helper()
		out := make([]seen, len(ids))
		errs := make([]error, len(ids))
		var wg sync.WaitGroup
		for i, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out[i], _, errs[i] = seqStep(s.HTTP, model, id, 1, start, end)
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		return out
	}

	t.Run("direct", func(t *testing.T) {
		// A and B together fill both slots: one execute, position = slot.
		both := steps("seq_slots", []uint64{1, 2}, true, false)
		for i, sv := range both {
			if sv.Batch != 2 || sv.NotReady != 0 {
				t.Errorf("sequence %d: execute of %d with %d not ready, want both sequences in one execute", i+1, sv.Batch, sv.NotReady)
			}
		}
		if both[0].Slot == both[1].Slot {
			t.Fatalf("both sequences at position %d", both[0].Slot)
		}
		// Alone, a request waits the queue delay for the other slot, then
		// runs at its slot's position; an empty slot before it is filled.
		for i, id := range []uint64{1, 2} {
			t0 := time.Now()
			sv, _, err := seqStep(s.HTTP, "seq_slots", id, 1, false, i == 0)
			if err != nil {
				t.Fatal(err)
			}
			if waited := time.Since(t0); waited < delay*3/4 {
				t.Errorf("sequence %d alone ran after %s, want it held about %s for the other slot", id, waited, delay)
			}
			wantBatch, wantFillers := both[i].Slot+1, both[i].Slot
			if sv.Slot != both[i].Slot || sv.Batch != wantBatch || sv.NotReady != wantFillers || !sv.Ready {
				t.Errorf("sequence %d alone: position %d of %d with %d not ready (READY %v), want position %d of %d with %d not ready",
					id, sv.Slot, sv.Batch, sv.NotReady, sv.Ready, both[i].Slot, wantBatch, wantFillers)
			}
			if sv.N != 2 || sv.Sum != 2 {
				t.Errorf("sequence %d: state n=%d sum=%d, want 2 and 2", id, sv.N, sv.Sum)
			}
		}
	})

	t.Run("oldest", func(t *testing.T) {
		// The preferred size is reached at once: no wait for the 60 s delay.
		for _, sv := range steps("seq_oldest", []uint64{7, 8, 9}, true, false) {
			if sv.Batch != 3 {
				t.Errorf("execute of %d requests, want the preferred 3", sv.Batch)
			}
		}
	})
}

// stubOf returns the pid and restart count of one instance's stub.
func stubOf(t *testing.T, s *server, model, instance string) (pid, restarts int) {
	t.Helper()
	for _, st := range allStubs(t, s, model) {
		if st.Instance == instance {
			return st.PID, st.Restarts
		}
	}
	t.Fatalf("no stub for instance %s of %s", instance, model)
	return 0, 0
}
