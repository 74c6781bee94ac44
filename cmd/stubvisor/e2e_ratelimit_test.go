package main

// The rate limiter end to end: rl_hold, rl_high and rl_low (rlRepo
// derives the other two from testdata/models/rl_high) all need the one
// copy of the global resource R (rl_high with priority 1, rl_low with
// priority 2), and each execute records its
// interval in the repository's rl_log.txt. rl_hold's execute waits for
// the test to close a FIFO, so the test decides when R comes free.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// rlRepo copies rl_high (and identity_fp32, which no limit applies to),
// derives rl_low (priority 2) and rl_hold (blocks on rl_gate.fifo) from
// it, and makes rl_hold's FIFO.
func rlRepo(t *testing.T) string {
	t.Helper()
	repo := copyRepo(t, "rl_high", "identity_fp32")
	deriveModel(t, repo, "rl_high", "rl_low", func(cfg string) string {
		return strings.Replace(cfg, "priority: 1", "priority: 2", 1)
	})
	deriveModel(t, repo, "rl_high", "rl_hold", func(cfg string) string {
		return cfg + `parameters { key: "BLOCK_FIFO" value { string_value: "rl_gate.fifo" } }
`
	})
	if err := syscall.Mkfifo(filepath.Join(repo, "rl_gate.fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	return repo
}

// deriveModel copies repo's model src to dst, renamed in its config and
// then changed by edit.
func deriveModel(t *testing.T, repo, src, dst string, edit func(cfg string) string) {
	t.Helper()
	if err := os.CopyFS(filepath.Join(repo, dst), os.DirFS(filepath.Join(repo, src))); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(repo, dst, "config.pbtxt")
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	renamed := strings.Replace(string(b), `name: "`+src+`"`, `name: "`+dst+`"`, 1)
	text := edit(renamed)
	if renamed == string(b) || text == renamed {
		t.Fatalf("deriving %s from %s changed nothing in its config", dst, src)
	}
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// rlRequest is one request of X = x to model (id names it).
func rlRequest(model, id string, x int32) *pb.ModelInferRequest {
	return &pb.ModelInferRequest{ModelName: model, Id: id,
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "X", Datatype: "INT32", Shape: []int64{1}}},
		RawInputContents: [][]byte{ipctest.INT32(x)}}
}

// holdR sends rl_hold a request and returns once its execute runs (it
// opened the FIFO): from then on it holds R, until release closes the
// FIFO; done then yields the request's error.
func holdR(t *testing.T, s *server, repo string) (release func(), done <-chan error) {
	t.Helper()
	_, c := grpcClient(t, s)
	errc := make(chan error, 1)
	go func() {
		_, err := c.ModelInfer(callCtx(t), rlRequest("rl_hold", "hold", 0))
		errc <- err
	}()
	fifo := filepath.Join(repo, "rl_gate.fifo")
	opened := make(chan *os.File, 1)
	go func() {
		// Opening the write end blocks until rl_hold's execute opens the
		// read end: the event that says it runs.
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			f = nil
		}
		opened <- f
	}()
	var w *os.File
	select {
	case w = <-opened:
	case err := <-errc:
		t.Fatalf("rl_hold answered before it read its FIFO: %v", err)
	case <-time.After(60 * time.Second):
		// Unblock the opener (a reader of our own), then give up.
		if r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			defer r.Close()
		}
		if f := <-opened; f != nil {
			f.Close()
		}
		t.Fatal("rl_hold's execute did not start within 60s")
	}
	if w == nil {
		t.Fatal("open rl_gate.fifo failed")
	}
	closed := false
	release = func() {
		if !closed {
			closed = true
			w.Close()
		}
	}
	t.Cleanup(release)
	return release, errc
}

// rlRecord is one execute as a model recorded it.
type rlRecord struct {
	model      string
	start, end int64
}

// rlLog reads rl_log.txt, ordered by start.
func rlLog(t *testing.T, repo string) []rlRecord {
	t.Helper()
	f, err := os.Open(filepath.Join(repo, "rl_log.txt"))
	if errors.Is(err, os.ErrNotExist) {
		return nil // nothing executed yet
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []rlRecord
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r rlRecord
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			t.Fatalf("rl_log.txt line %q", sc.Text())
		}
		r.model = fields[0]
		r.start, _ = strconv.ParseInt(fields[1], 10, 64)
		r.end, _ = strconv.ParseInt(fields[2], 10, 64)
		recs = append(recs, r)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].start < recs[j].start })
	return recs
}

// rlStub is model's one stub as /v2/models/<model>/stubs shows it.
type rlStub struct {
	PID     int     `json:"pid"`
	Waiting bool    `json:"rate_limit_waiting"`
	WaitS   float64 `json:"rate_limit_wait_s"`
}

func rlStubOf(t *testing.T, s *server, model string) rlStub {
	t.Helper()
	var ms []struct {
		Stubs []rlStub `json:"stubs"`
	}
	s.getJSON("/v2/models/"+model+"/stubs", &ms)
	if len(ms) != 1 || len(ms[0].Stubs) != 1 {
		t.Fatalf("%s: stubs %+v", model, ms)
	}
	return ms[0].Stubs[0]
}

// rlWaiting reports whether model's instance waits for the rate limiter.
func rlWaiting(t *testing.T, s *server, model string) bool {
	return rlStubOf(t, s, model).Waiting
}

// TestRateLimiter: with --rate-limit=execution_count, executes that need
// R never overlap across models; while rl_high and rl_low both wait,
// rl_high (priority 1) gets two turns for each of rl_low's (priority 2),
// in the order Triton's scaled priority gives; a request whose deadline
// passes while it waits fails and leaves the queue; a stub killed while
// it holds R gives it back, so the next waiter runs; and a model's warmup
// waits for R as its requests do.
func TestRateLimiter(t *testing.T) {
	ipctest.RequirePython(t)
	repo := rlRepo(t)
	s := startServer(t, repo, "--rate-limit=execution_count", "--log-verbose=1", "--model-control-mode=explicit",
		"--load-model=rl_hold", "--load-model=rl_high", "--load-model=rl_low", "--load-model=identity_fp32")
	t.Run("turns in priority order, one at a time", func(t *testing.T) { rlTurns(t, s, repo) })
	t.Run("a deadline ends a wait, a dead stub gives R back", func(t *testing.T) { rlCancelAndDeath(t, s, repo) })
	t.Run("a warmup sample waits for R", func(t *testing.T) { rlWarmup(t, s, repo) })
}

// rlTurns: rl_hold holds R while n requests each for rl_high and rl_low
// queue up; then R comes free and the records show the turns.
func rlTurns(t *testing.T, s *server, repo string) {
	release, holdDone := holdR(t, s, repo)

	// On one stream each request is queued before the next is read, so
	// the marker's answer (identity_fp32 needs nothing) says every
	// request before it waits in the server.
	_, c := grpcClient(t, s)
	st, err := c.ModelStreamInfer(callCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	for i := range n {
		for _, m := range []string{"rl_high", "rl_low"} {
			if err := st.Send(rlRequest(m, m+"/"+strconv.Itoa(i), int32(i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := st.Send(&pb.ModelInferRequest{ModelName: "identity_fp32", Id: "marker",
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{1}}},
		RawInputContents: [][]byte{ipctest.FP32(1)}}); err != nil {
		t.Fatal(err)
	}
	m, err := st.Recv()
	if err != nil || m.ErrorMessage != "" || m.InferResponse.GetId() != "marker" {
		t.Fatalf("first answer %v %v, want the marker's: nothing that needs R runs while rl_hold holds it", m, err)
	}
	waitFor(t, 30*time.Second, "rl_high and rl_low waiting for R", func() bool {
		return rlWaiting(t, s, "rl_high") && rlWaiting(t, s, "rl_low")
	})

	release()
	if err := <-holdDone; err != nil {
		t.Fatalf("rl_hold: %v", err)
	}
	_ = st.CloseSend()
	got := map[string]int{}
	recvEach(t, st, func(m *pb.ModelStreamInferResponse) bool {
		if m.ErrorMessage != "" {
			t.Fatalf("stream error: %s", m.ErrorMessage)
		}
		_, y := outputByName(t, m.InferResponse, "Y")
		id := m.InferResponse.GetId()
		if _, want, _ := strings.Cut(id, "/"); strconv.Itoa(int(binary.LittleEndian.Uint32(y))) != want {
			t.Errorf("%s answered Y %v", id, y)
		}
		got[m.InferResponse.GetModelName()]++
		return true
	})
	if got["rl_high"] != n || got["rl_low"] != n {
		t.Fatalf("answers %v, want %d of each", got, n)
	}

	recs := rlLog(t, repo)
	if len(recs) != 2*n+1 || recs[0].model != "rl_hold" {
		t.Fatalf("recorded %+v, want rl_hold's execute then %d", recs, 2*n)
	}
	for i := 1; i < len(recs); i++ {
		if recs[i].start < recs[i-1].end {
			t.Errorf("%s started at %d, before %s ended at %d: two executes held R at once", recs[i].model, recs[i].start, recs[i-1].model, recs[i-1].end)
		}
	}
	// Scaled priority is executions × priority; ties go to the lower
	// priority value, so whichever reached the limiter first, rl_high
	// goes first.
	var order strings.Builder
	for _, r := range recs[1:10] {
		order.WriteByte(strings.ToUpper(strings.TrimPrefix(r.model, "rl_"))[0])
	}
	if o := order.String(); o != "HLHHLHHLH" {
		t.Errorf("first nine turns %s, want HLHHLHHLH (rl_high first, then twice for each of rl_low's)", o)
	}
	t.Logf("turns: %s", order.String())
}

// rlCancelAndDeath: while rl_hold holds R, a request for rl_low with a
// short deadline fails and leaves the queue; then rl_hold's stub is killed
// and rl_high, waiting, runs.
func rlCancelAndDeath(t *testing.T, s *server, repo string) {
	before, waitedBefore := len(rlLog(t, repo)), rlStubOf(t, s, "rl_low").WaitS
	_, holdDone := holdR(t, s, repo)
	_, c := grpcClient(t, s)

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := c.ModelInfer(ctx, rlRequest("rl_low", "late", 1))
	if code := status.Code(err); code != codes.DeadlineExceeded && code != codes.Canceled {
		t.Fatalf("rl_low while R is held: %v, want its deadline to end it", err)
	}
	waitFor(t, 10*time.Second, "rl_low to stop waiting", func() bool { return !rlWaiting(t, s, "rl_low") })
	if st := rlStubOf(t, s, "rl_low"); st.WaitS <= waitedBefore {
		t.Errorf("rl_low's stub shows rate_limit_wait_s %v (%v before), want its wait added", st.WaitS, waitedBefore)
	}

	highDone := make(chan error, 1)
	go func() {
		_, err := c.ModelInfer(callCtx(t), rlRequest("rl_high", "next", 2))
		highDone <- err
	}()
	waitFor(t, 10*time.Second, "rl_high waiting for R", func() bool { return rlWaiting(t, s, "rl_high") })
	if err := syscall.Kill(rlStubOf(t, s, "rl_hold").PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-holdDone; status.Code(err) != codes.Unavailable {
		t.Errorf("rl_hold after its stub was killed: %v, want Unavailable", err)
	}
	if err := <-highDone; err != nil {
		t.Fatalf("rl_high after rl_hold's stub died holding R: %v", err)
	}
	if recs := rlLog(t, repo)[before:]; len(recs) != 1 || recs[0].model != "rl_high" {
		t.Errorf("new records %+v, want rl_high's execute alone", recs)
	}
}

// rlWarmup loads rl_warm (rl_low with a warmup sample) while rl_hold
// holds R: its warmup execute starts only once R is free.
func rlWarmup(t *testing.T, s *server, repo string) {
	deriveModel(t, repo, "rl_low", "rl_warm", func(cfg string) string {
		return cfg + `
model_warmup [ { name: "zeros" batch_size: 1
  inputs { key: "X" value { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } } } ]
`
	})
	before := len(rlLog(t, repo))
	release, holdDone := holdR(t, s, repo)
	loaded := make(chan error, 1)
	go func() {
		resp, err := http.Post(s.HTTP+"/v2/repository/models/rl_warm/load", "application/json", strings.NewReader("{}"))
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				err = fmt.Errorf("load: %d %s", resp.StatusCode, body)
			}
		}
		loaded <- err
	}()
	waitFor(t, 60*time.Second, "rl_warm's warmup to start", func() bool {
		return strings.Contains(s.Log(), "model 'rl_warm' instance rl_warm_0_0 is running warmup sample 'zeros'")
	})
	release()
	if err := <-holdDone; err != nil {
		t.Fatalf("rl_hold: %v", err)
	}
	select {
	case err := <-loaded:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("rl_warm did not load within 60s of R coming free")
	}
	recs := rlLog(t, repo)[before:]
	if len(recs) != 2 || recs[0].model != "rl_hold" || recs[1].model != "rl_warm" || recs[1].start < recs[0].end {
		t.Errorf("records %+v, want rl_hold's execute, then rl_warm's warmup after it", recs)
	}
}

// TestRateLimiterOff: with --rate-limit=off (Triton's default) the
// rate_limiter of every config, and --rate-limit-resource, have no
// effect: rl_high and rl_low run while rl_hold holds R.
func TestRateLimiterOff(t *testing.T) {
	slow(t)
	ipctest.RequirePython(t)
	repo := rlRepo(t)
	s := startServer(t, repo, "--rate-limit=off", "--rate-limit-resource=R:0")
	release, holdDone := holdR(t, s, repo)
	_, c := grpcClient(t, s)
	for _, m := range []string{"rl_high", "rl_low"} {
		if _, err := c.ModelInfer(callCtx(t), rlRequest(m, m, 1)); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
	}
	release()
	if err := <-holdDone; err != nil {
		t.Fatalf("rl_hold: %v", err)
	}
	recs := rlLog(t, repo)
	if len(recs) != 3 || recs[0].model != "rl_hold" {
		t.Fatalf("records %+v, want rl_hold's first", recs)
	}
	for _, r := range recs[1:] {
		if r.end > recs[0].end {
			t.Errorf("%s ran [%d, %d], not within rl_hold's [%d, %d]", r.model, r.start, r.end, recs[0].start, recs[0].end)
		}
	}
	if !strings.Contains(s.Log(), "--rate-limit-resource has no effect while --rate-limit is off") {
		t.Error("the log does not say that --rate-limit-resource has no effect")
	}
}

// TestRateLimiterRefusals: a model whose resources cannot be had does not
// load, with Triton's texts.
func TestRateLimiterRefusals(t *testing.T) {
	ipctest.RequirePython(t)
	repo := rlRepo(t)
	for name, edit := range map[string][2]string{
		"rl_device": {"global: true", "global: false"},
		"rl_big":    {"count: 1", "count: 2"},
	} {
		if err := os.CopyFS(filepath.Join(repo, name), os.DirFS(filepath.Join(repo, "rl_low"))); err != nil {
			t.Fatal(err)
		}
		cfg := filepath.Join(repo, name, "config.pbtxt")
		b, err := os.ReadFile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Replace(strings.Replace(string(b), `"rl_low"`, `"`+name+`"`, 1), edit[0], edit[1], 1)
		if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := startServer(t, repo, "--rate-limit=execution_count", "--rate-limit-resource=R:1",
		"--model-control-mode=explicit", "--load-model=rl_high")
	for _, tc := range []struct{ model, want string }{
		{"rl_device", `failed to load 'rl_device': Resource "R" is present as both global and device-specific resource in the model configuration.`},
		{"rl_big", `failed to load 'rl_big': Resource count for "R" is limited to 1 which will prevent scheduling of one or more model instances, the minimum required count is 2`},
	} {
		t.Run(tc.model, func(t *testing.T) {
			code, body := s.postJSON("/v2/repository/models/"+tc.model+"/load", map[string]any{})
			if code != 400 || httpErrorText(t, body) != tc.want {
				t.Errorf("load: %d %s, want 400 %q", code, body, tc.want)
			}
		})
	}
	// rl_high still serves, alone with R.
	_, c := grpcClient(t, s)
	if _, err := c.ModelInfer(callCtx(t), rlRequest("rl_high", "after", 1)); err != nil {
		t.Fatal(err)
	}
}

// TestRateLimitFlags: bad values end the server with tritonserver's texts.
func TestRateLimitFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--rate-limit=fast"}, "invalid argument for --rate-limit"},
		{[]string{"--rate-limit-resource=R1"}, "--rate-limit-resource option format is '<resource_name>:<count>:<device>' or '<resource_name>:<count>'. Got R1"},
		{[]string{"--rate-limit-resource=R1:2:0:1"}, "--rate-limit-resource option format is '<resource_name>:<count>:<device>' or '<resource_name>:<count>'. Got R1:2:0:1"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, err := exec.Command(binPath, append([]string{"--model-repository", t.TempDir()}, tc.args...)...).CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), tc.want) {
				t.Errorf("got %v:\n%s\nwant exit 2 with %q", err, out, tc.want)
			}
		})
	}
}
