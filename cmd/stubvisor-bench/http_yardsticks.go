package main

// The http benchmark's yardsticks, each in a process of its own so that
// its CPU per request can be read from /proc next to stubvisor's:
//
//   - the floor: a trivial net/http handler (this binary, role
//     http-floor) that reads each request body and answers with the body
//     stubvisor answered with, and the same handler on fasthttp (the
//     engine of --http-engine fasthttp), the floor of that engine;
//   - FastAPI: uvicorn with uvloop and httptools and two workers, serving
//     the same models' numpy logic in-process (fastapi_yardstick.py).

import (
	"bufio"
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

//go:embed fastapi_yardstick.py
var fastapiYardstick []byte

func init() {
	registerRole("http-floor", httpFloorRole)
	registerRole("http-floor-fasthttp", httpFastFloorRole)
}

// yardProc is a yardstick process serving HTTP at url.
type yardProc struct {
	cmd    *exec.Cmd
	url    string
	exited chan struct{}
	dir    string // removed at stop when set
}

func (p *yardProc) pid() int { return p.cmd.Process.Pid }

// stop terminates the process (SIGTERM, SIGKILL after 10 s) and waits.
func (p *yardProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	if p.dir != "" {
		os.RemoveAll(p.dir)
	}
}

func startYard(cmd *exec.Cmd) (*yardProc, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &yardProc{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// floorSpec is what the floor role answers with, passed as JSON in
// floorSpecEnv.
type floorSpec struct {
	Body   []byte
	Header map[string]string
}

const floorSpecEnv = "STUBVISOR_BENCH_FLOOR"

// startHTTPFloor starts the floor on engine ("net/http" or "fasthttp")
// answering every request with body and the given response headers
// (Content-Type, Inference-Header-Content-Length).
func startHTTPFloor(body []byte, h http.Header, engine string) (*yardProc, error) {
	spec := floorSpec{Body: body, Header: map[string]string{}}
	for _, k := range []string{"Content-Type", "Inference-Header-Content-Length"} {
		if v := h.Get(k); v != "" {
			spec.Header[k] = v
		}
	}
	f, err := os.CreateTemp("", "stubvisor-bench-floor-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	err = json.NewEncoder(f).Encode(spec)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	role := "http-floor"
	if engine == "fasthttp" {
		role = "http-floor-fasthttp"
	}
	cmd.Env = append(os.Environ(), roleEnv+"="+role, floorSpecEnv+"="+f.Name())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p, err := startYard(cmd)
	if err != nil {
		return nil, err
	}
	addr := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		addr <- strings.TrimSpace(line)
	}()
	select {
	case a := <-addr:
		if a == "" {
			p.stop()
			return nil, errors.New("http floor exited at start")
		}
		p.url = "http://" + a
		return p, nil
	case <-time.After(30 * time.Second):
		p.stop()
		return nil, errors.New("http floor did not start within 30s")
	}
}

// floorListen reads the floor's spec and opens its listener, printing its
// address.
func floorListen() (floorSpec, net.Listener, error) {
	b, err := os.ReadFile(os.Getenv(floorSpecEnv))
	var spec floorSpec
	if err == nil {
		err = json.Unmarshal(b, &spec)
	}
	if err != nil {
		return spec, nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return spec, nil, err
	}
	fmt.Println(l.Addr().String())
	return spec, l, nil
}

// httpFloorRole serves the floor handler and prints its address.
func httpFloorRole() int {
	spec, l, err := floorListen()
	if err != nil {
		fmt.Fprintln(os.Stderr, "http-floor:", err)
		return 1
	}
	size := strconv.Itoa(len(spec.Body))
	pool := sync.Pool{New: func() any { return new(bytes.Buffer) }}
	err = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := pool.Get().(*bytes.Buffer)
		buf.Reset()
		_, _ = buf.ReadFrom(r.Body)
		pool.Put(buf)
		for k, v := range spec.Header {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Length", size)
		_, _ = w.Write(spec.Body)
	}))
	fmt.Fprintln(os.Stderr, "http-floor:", err)
	return 1
}

// httpFastFloorRole serves the floor handler on fasthttp: the request body
// read whole (fasthttp's default), the canned reply set from one buffer.
func httpFastFloorRole() int {
	spec, l, err := floorListen()
	if err != nil {
		fmt.Fprintln(os.Stderr, "http-floor-fasthttp:", err)
		return 1
	}
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			_ = ctx.PostBody()
			for k, v := range spec.Header {
				ctx.Response.Header.Set(k, v)
			}
			ctx.SetBody(spec.Body)
		},
		MaxRequestBodySize:    1 << 30,
		NoDefaultServerHeader: true,
	}
	err = srv.Serve(l)
	fmt.Fprintln(os.Stderr, "http-floor-fasthttp:", err)
	return 1
}

// startFastAPI starts the FastAPI yardstick with workers uvicorn workers
// under python and waits (up to a minute) until it answers.
func startFastAPI(python string, workers int) (*yardProc, error) {
	dir, err := os.MkdirTemp("", "stubvisor-bench-fastapi-")
	if err != nil {
		return nil, err
	}
	script := filepath.Join(dir, "fastapi_yardstick.py")
	if err := os.WriteFile(script, fastapiYardstick, 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// uvicorn with several workers binds the port itself: take a free one.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(python, script, strconv.Itoa(port), strconv.Itoa(workers))
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	p, err := startYard(cmd)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p.dir = dir
	p.url = fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(p.url + "/v2/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case <-p.exited:
			p.stop()
			return nil, fmt.Errorf("fastapi yardstick exited at start (are python3-fastapi, python3-uvicorn, python3-uvloop, python3-httptools installed?)")
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, errors.New("fastapi yardstick did not answer within a minute")
		}
	}
}
