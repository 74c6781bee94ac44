package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// benchServer is a stubvisor process under test with one listener (HTTP
// or gRPC) on a kernel-chosen port; the others are off.
type benchServer struct {
	cmd    *exec.Cmd
	addr   string // host:port of the listener
	exited chan struct{}
}

var listenRE = regexp.MustCompile(`listening: service=(\S+) address=(\S+)`)

// startBenchServer starts bin on repo serving only service ("HTTP" or
// "gRPC") and waits (up to 2 minutes) until every model is loaded.
func startBenchServer(bin, repo, cache, service string, extra ...string) (*benchServer, error) {
	port := map[string]string{"HTTP": "-1", "gRPC": "-1"}
	port[service] = "0"
	args := append([]string{"--model-repository", repo, "--address", "127.0.0.1",
		"--http-port", port["HTTP"], "--grpc-port", port["gRPC"], "--metrics-port", "-1",
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
	p := &benchServer{cmd: cmd, exited: make(chan struct{})}
	ready := make(chan string, 1)
	var logMu sync.Mutex
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		addr := ""
		for sc.Scan() {
			line := sc.Text()
			logMu.Lock()
			if log.Len() < 1<<20 {
				log.WriteString(line + "\n")
			}
			logMu.Unlock()
			if m := listenRE.FindStringSubmatch(line); m != nil && m[1] == service {
				addr = m[2]
			}
			if strings.Contains(line, "stubvisor started") {
				ready <- addr
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	select {
	case p.addr = <-ready:
		if p.addr == "" {
			p.stop()
			return nil, fmt.Errorf("stubvisor started without a %s listener", service)
		}
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
