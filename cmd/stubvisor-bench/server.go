package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// benchServer is a stubvisor process under test with the listeners it was
// started with (HTTP, gRPC, metrics) on kernel-chosen ports; the others
// are off.
type benchServer struct {
	cmd    *exec.Cmd
	addr   string            // host:port of the first listener asked for
	addrs  map[string]string // every listener's host:port, by service
	exited chan struct{}
}

var listenRE = regexp.MustCompile(`listening: service=(\S+) address=(\S+)`)

// startBenchServer starts bin on repo serving only service ("HTTP",
// "gRPC", "metrics", "OpenAI", or several joined by "+") and waits (up to 2
// minutes) until every model is loaded.
func startBenchServer(bin, repo, cache, service string, extra ...string) (*benchServer, error) {
	port := map[string]string{"HTTP": "-1", "gRPC": "-1", "metrics": "-1", "OpenAI": "-1"}
	services := strings.Split(service, "+")
	for _, svc := range services {
		port[svc] = "0"
	}
	args := append([]string{"--model-repository", repo, "--address", "127.0.0.1",
		"--http-port", port["HTTP"], "--grpc-port", port["gRPC"], "--metrics-port", port["metrics"], "--openai-port", port["OpenAI"],
		"--cache-dir", cache}, extra...)
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &benchServer{cmd: cmd, exited: make(chan struct{}), addrs: map[string]string{}}
	ready := make(chan map[string]string, 1)
	var logMu sync.Mutex
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		addrs := map[string]string{}
		for sc.Scan() {
			line := sc.Text()
			logMu.Lock()
			if log.Len() < 1<<20 {
				log.WriteString(line + "\n")
			}
			logMu.Unlock()
			if m := listenRE.FindStringSubmatch(line); m != nil {
				addrs[m[1]] = m[2]
			}
			if strings.Contains(line, "stubvisor started") {
				ready <- addrs
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	select {
	case p.addrs = <-ready:
		for _, svc := range services {
			if p.addrs[svc] == "" {
				p.stop()
				return nil, fmt.Errorf("stubvisor started without a %s listener", svc)
			}
		}
		p.addr = p.addrs[services[0]]
		return p, nil
	case <-p.exited:
		logMu.Lock()
		defer logMu.Unlock()
		return nil, fmt.Errorf("stubvisor exited at start:\n%s", log.String())
	case <-time.After(2 * time.Minute):
		p.stop()
		return nil, errors.New("stubvisor did not start within 2 minutes")
	}
}

// url is the base URL of an HTTP listener.
func (p *benchServer) url() string { return "http://" + p.addr }

// stop sends SIGTERM and waits for the exit (SIGKILL after 30s).
func (p *benchServer) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// serverFlags are the flags of every benchmark that starts bin/stubvisor.
type serverFlags struct{ bin, python *string }

func addServerFlags(fs *flag.FlagSet) serverFlags {
	return serverFlags{
		bin:    fs.String("bin", "", "stubvisor binary (default <repo>/bin/stubvisor)"),
		python: fs.String("python", "/usr/bin/python3", "Python interpreter of the stubs"),
	}
}

// benchModel is a model of a benchmark's repository: a copy of testdata's
// source model, named name, with config as its config.pbtxt when set.
type benchModel struct{ name, source, config string }

// benchEnv is a checked binary and a temporary repository for it.
type benchEnv struct {
	bin, python, tmp, repo string
}

// newBenchEnv resolves the binary (it must have been built) and writes the
// models into a temporary repository; close removes it.
func newBenchEnv(name string, f serverFlags, models ...benchModel) (*benchEnv, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	e := &benchEnv{bin: *f.bin, python: *f.python}
	if e.bin == "" {
		e.bin = filepath.Join(root, "bin", "stubvisor")
	}
	if _, err := os.Stat(e.bin); err != nil {
		return nil, fmt.Errorf("%w (run make build first)", err)
	}
	if e.tmp, err = os.MkdirTemp("", "stubvisor-bench-"+name+"-"); err != nil {
		return nil, err
	}
	e.repo = filepath.Join(e.tmp, "models")
	for _, m := range models {
		dst := filepath.Join(e.repo, m.name)
		err := os.CopyFS(dst, os.DirFS(filepath.Join(root, "testdata", "models", m.source)))
		if err == nil && m.config != "" {
			err = os.WriteFile(filepath.Join(dst, "config.pbtxt"), []byte(m.config), 0o644)
		}
		if err == nil {
			err = buildGoModel(root, m, dst)
		}
		if err != nil {
			e.close()
			return nil, fmt.Errorf("model %s: %w", m.name, err)
		}
	}
	return e, nil
}

// buildGoModel builds a Go-native model's executable from its sources in
// testdata, inside this module, as the server could not from the
// temporary repository.
func buildGoModel(root string, m benchModel, dst string) error {
	config, err := os.ReadFile(filepath.Join(dst, "config.pbtxt"))
	if err != nil || !strings.Contains(string(config), `backend: "go"`) {
		return err
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(dst, "1", "model"), ".")
	cmd.Dir = filepath.Join(root, "testdata", "models", m.source, "1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w: %s", err, out)
	}
	return nil
}

// start starts the binary on the repository serving only service.
func (e *benchEnv) start(service string, extra ...string) (*benchServer, error) {
	return startBenchServer(e.bin, e.repo, filepath.Join(e.tmp, "cache"), service, append([]string{"--python", e.python}, extra...)...)
}

func (e *benchEnv) close() { os.RemoveAll(e.tmp) }
