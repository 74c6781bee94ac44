package main

// The end-to-end suite: every test here starts the built stubvisor binary
// on a model repository, talks to it over real HTTP (and gRPC) on loopback,
// and stops it with SIGTERM, asserting that no stub process, fd or
// /dev/shm entry outlives it.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binPath is the stubvisor binary built once for the whole suite.
var binPath string

// cacheDir is the --cache-dir every server of the suite shares: a Go model
// is built once for the suite, not once per test that loads it (entries
// are keyed by the server binary and the model's sources). Two servers
// that run at once must not build the same Go model: the tests that run in
// parallel load none.
var cacheDir string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "stubvisor-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binPath = filepath.Join(dir, "stubvisor")
	cacheDir = filepath.Join(dir, "cache")
	args := []string{"build", "-o", binPath}
	if raceEnabled {
		// Under -race the binary is checked too: a race it reports fails
		// the test that started it (startServer).
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build stubvisor: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// server is one running stubvisor process.
type server struct {
	t       *testing.T
	cmd     *exec.Cmd
	HTTP    string // base URL, e.g. http://127.0.0.1:41234
	GRPC    string // host:port, or "" when gRPC is off
	Metrics string // base URL
	OpenAI  string // base URL, or "" when --openai-port is off
	Repo    string
	logMu   sync.Mutex
	log     bytes.Buffer
	exited  chan struct{}
	waitErr error
}

var listenRE = regexp.MustCompile(`listening: service=(\S+) address=(\S+)`)

// startServer starts stubvisor with args (plus ports 0 and the suite's
// cache dir) and waits until it listens. The server is stopped with SIGTERM at
// cleanup, and the test fails if it leaves a process or /dev/shm entry.
func startServer(t *testing.T, repo string, args ...string) *server {
	t.Helper()
	shmBefore := shmEntries(t)
	s := &server{t: t, Repo: repo, exited: make(chan struct{})}
	all := []string{
		"--model-repository", repo, "--address", "127.0.0.1",
		"--http-port", "0", "--grpc-port", "0", "--metrics-port", "0",
		"--cache-dir", cacheDir, "--exit-on-error=false",
	}
	// STUBVISOR_TEST_HTTP_ENGINE runs the suite on another HTTP engine
	// (--http-engine) where a test does not choose one.
	if e := os.Getenv("STUBVISOR_TEST_HTTP_ENGINE"); e != "" && !slices.Contains(args, "--http-engine") {
		all = append(all, "--http-engine", e)
	}
	all = append(all, args...)
	s.cmd = exec.Command(binPath, all...)
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.Stdout = io.Discard
	if err := startTied(s.cmd); err != nil {
		t.Fatal(err)
	}
	addrs := make(chan [2]string, 8)
	started := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		once := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			s.logMu.Lock()
			s.log.WriteString(line + "\n")
			s.logMu.Unlock()
			if m := listenRE.FindStringSubmatch(line); m != nil {
				addrs <- [2]string{m[1], m[2]}
			}
			if strings.Contains(line, "stubvisor started") {
				once.Do(func() { close(started) })
			}
		}
	}()
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("server log:\n%s", s.Log())
		}
		if strings.Contains(s.Log(), "WARNING: DATA RACE") {
			t.Errorf("the race detector found a race in stubvisor:\n%s", s.Log())
		}
		assertNoStubs(t, s.cmd.Process.Pid)
		assertShmUnchanged(t, shmBefore)
	})
	select {
	case <-started:
	case <-s.exited:
		t.Fatalf("stubvisor exited at start (%v):\n%s", s.waitErr, s.Log())
	case <-time.After(90 * time.Second):
		t.Fatalf("stubvisor did not start within 90s:\n%s", s.Log())
	}
	for len(addrs) > 0 {
		a := <-addrs
		switch a[0] {
		case "HTTP":
			s.HTTP = "http://" + a[1]
		case "gRPC":
			s.GRPC = a[1]
		case "metrics":
			s.Metrics = "http://" + a[1]
		case "OpenAI":
			s.OpenAI = "http://" + a[1]
		}
	}
	return s
}

// Log returns what the server logged so far.
func (s *server) Log() string {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return s.log.String()
}

// Stop sends SIGTERM and waits for the exit (SIGKILL after 60s). It is
// idempotent.
func (s *server) Stop() {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(60 * time.Second):
		s.t.Errorf("stubvisor did not exit within 60s of SIGTERM")
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// assertNoStubs fails if any process still has the server as its parent
// or mentions it; stubs must never outlive the server.
func assertNoStubs(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := childrenOf(pid)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("processes left behind by stubvisor %d: %v", pid, left)
			return
		}
		time.Sleep(20 * time.Millisecond) // polling the process table: nothing to wait on
	}
}

// childrenOf lists live processes whose parent is pid or whose
// environment names it as their supervisor.
func childrenOf(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// stat: pid (comm) state ppid ...
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 || f[0] == "Z" && f[1] != strconv.Itoa(pid) {
			continue
		}
		if f[1] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}

func shmEntries(t *testing.T) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir("/dev/shm")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, e := range ents {
		m[e.Name()] = true
	}
	return m
}

func assertShmUnchanged(t *testing.T, before map[string]bool) {
	t.Helper()
	for name := range shmEntries(t) {
		if !before[name] && !strings.HasPrefix(name, "e2e-client-") {
			t.Errorf("/dev/shm/%s left behind", name)
		}
	}
}

// do sends an HTTP request and returns the status and body.
func (s *server) do(method, path string, body []byte, header ...string) (int, http.Header, []byte) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.HTTP+path, bytes.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// getJSON GETs path and decodes the JSON body into v, failing unless the
// status is 200.
func (s *server) getJSON(path string, v any) {
	s.t.Helper()
	code, _, b := s.do("GET", path, nil)
	if code != 200 {
		s.t.Fatalf("GET %s: %d %s", path, code, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		s.t.Fatalf("GET %s: %v: %s", path, err, b)
	}
}

// postJSON POSTs v as JSON and returns the status and body.
func (s *server) postJSON(path string, v any) (int, []byte) {
	s.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		s.t.Fatal(err)
	}
	code, _, body := s.do("POST", path, b, "Content-Type", "application/json")
	return code, body
}

// scrape GETs /metrics from the metrics listener, failing unless it
// answers 200, and returns the text and its Content-Type.
func (s *server) scrape() (text, contentType string) {
	s.t.Helper()
	resp, err := http.Get(s.Metrics + "/metrics")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		s.t.Fatalf("scrape: %d %v", resp.StatusCode, err)
	}
	return string(b), resp.Header.Get("Content-Type")
}

// copyRepo copies the named models of testdata/models into a fresh
// repository, so tests can add broken models beside them.
func copyRepo(t *testing.T, models ...string) string {
	t.Helper()
	dst := t.TempDir()
	for _, m := range models {
		src := filepath.Join("..", "..", "testdata", "models", m)
		if err := os.CopyFS(filepath.Join(dst, m), os.DirFS(src)); err != nil {
			t.Fatalf("copy model %s: %v", m, err)
		}
	}
	return dst
}

// modelsRepo is testdata/models as an absolute path, for tests that use
// the repository in place (Go models build from their sources inside this
// module, so they cannot be copied out of it).
func modelsRepo(t *testing.T) string {
	t.Helper()
	repo, err := filepath.Abs(filepath.Join("..", "..", "testdata", "models"))
	if err != nil {
		t.Fatal(err)
	}
	return repo
}

// waitFor polls cond every 20ms until it holds or the timeout passes; it
// is for state the server exposes only by polling (status endpoints).
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond) // polling a status endpoint: nothing to wait on
	}
}
