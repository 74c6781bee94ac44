// Package e2e runs the stubvisor image in podman the way Kubernetes runs
// it, and checks the Helm chart and the KServe manifests against the
// Kubernetes and KServe schemas. make test-deploy builds the image and
// helm, and sets STUBVISOR_IMAGE, HELM and PODMAN (and CONTAINERS_CONF).
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// kserveArgs is the argument list of KServe's kserve-tritonserver
// ClusterServingRuntime, unchanged.
var kserveArgs = []string{"tritonserver", "--model-store=/mnt/models", "--grpc-port=9000",
	"--http-port=8080", "--allow-grpc=true", "--allow-http=true"}

// image returns the image under test, or skips when none was built.
func image(t *testing.T) string {
	t.Helper()
	img := os.Getenv("STUBVISOR_IMAGE")
	if img == "" {
		t.Skip("STUBVISOR_IMAGE is not set: make test-deploy builds the image and sets it")
	}
	return img
}

// podman runs podman with args and returns its standard output.
func podman(t *testing.T, timeout time.Duration, args ...string) (string, error) {
	t.Helper()
	cmdline := strings.Fields(os.Getenv("PODMAN"))
	if len(cmdline) == 0 {
		cmdline = []string{"podman"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, cmdline[0], append(cmdline[1:], args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("podman %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// mustPodman is podman that fails the test on error.
func mustPodman(t *testing.T, args ...string) string {
	t.Helper()
	out, err := podman(t, 2*time.Minute, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// modelRepo makes a model repository of the named models (from the
// server's testdata, or this package's) that uid 1000 can read.
func modelRepo(t *testing.T, models ...string) string {
	t.Helper()
	repo := filepath.Join(t.TempDir(), "models")
	for _, m := range models {
		src := filepath.Join("..", "..", "testdata", "models", m)
		if _, err := os.Stat(src); err != nil {
			src = filepath.Join("testdata", "models", m)
		}
		if err := os.CopyFS(filepath.Join(repo, m), os.DirFS(src)); err != nil {
			t.Fatal(err)
		}
	}
	// t.TempDir is private to its owner; the server in the container runs
	// as uid 1000.
	for dir := repo; dir != filepath.Clean(os.TempDir()) && dir != "/"; dir = filepath.Dir(dir) {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	err := filepath.WalkDir(repo, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.Chmod(p, 0o755)
		}
		return os.Chmod(p, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return repo
}

var containerSeq atomic.Int64

// container is one running stubvisor container.
type container struct {
	t       *testing.T
	name    string
	HTTP    string // base URL on the host
	GRPC    string // host:port
	Metrics string // base URL
	started time.Time
}

// hardened are the run options Kubernetes applies with the manifests'
// securityContext: uid 1000, no capabilities, no privilege escalation, a
// read-only root filesystem with one writable emptyDir at /tmp.
var hardened = []string{"--user=1000:1000", "--cap-drop=ALL", "--security-opt=no-new-privileges",
	"--read-only", "--read-only-tmpfs=false", "--tmpfs=/tmp:rw,mode=1777,size=256m"}

// runContainer starts the image with the model repository mounted
// read-only at /mnt/models, opts (podman run options) and args (the
// command), publishes 8080, 9000 and 8002 on loopback, and waits until the
// server is ready. It is removed at cleanup.
func runContainer(t *testing.T, repo string, opts, args []string) *container {
	t.Helper()
	c := &container{t: t, name: fmt.Sprintf("stubvisor-e2e-%d-%d", os.Getpid(), containerSeq.Add(1))}
	run := []string{"run", "-d", "--name", c.name, "-v", repo + ":/mnt/models:ro",
		"-p", "127.0.0.1::8080", "-p", "127.0.0.1::9000", "-p", "127.0.0.1::8002"}
	run = append(append(append(run, opts...), image(t)), args...)
	c.started = time.Now()
	mustPodman(t, run...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("container log:\n%s", c.logs())
		}
		if _, err := podman(t, time.Minute, "rm", "-f", "-t", "0", c.name); err != nil {
			t.Error(err)
		}
	})
	c.HTTP = "http://" + c.port("8080")
	c.GRPC = c.port("9000")
	c.Metrics = "http://" + c.port("8002")
	c.waitReady(90 * time.Second)
	return c
}

// port returns the host address published for the container port.
func (c *container) port(p string) string {
	out := strings.TrimSpace(mustPodman(c.t, "port", c.name, p+"/tcp"))
	if i := strings.IndexByte(out, '\n'); i >= 0 {
		out = out[:i]
	}
	return strings.Replace(out, "0.0.0.0", "127.0.0.1", 1)
}

// waitReady polls /v2/health/ready until it answers 200.
func (c *container) waitReady(timeout time.Duration) {
	c.t.Helper()
	waitFor(c.t, timeout, "the server in "+c.name+" to be ready", func() bool {
		code, _, err := httpDo("GET", c.HTTP+"/v2/health/ready", nil)
		return err == nil && code == 200
	})
}

// exec runs a command in the container as its user.
func (c *container) exec(args ...string) (string, error) {
	return podman(c.t, time.Minute, append([]string{"exec", c.name}, args...)...)
}

var httpClient = &http.Client{Timeout: 30 * time.Second}

// httpDo sends one request and returns the status and body.
func httpDo(method, url string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// getJSON decodes the JSON body of GET url into v.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	code, b, err := httpDo("GET", url, nil)
	if err != nil || code != 200 {
		t.Fatalf("GET %s: %d %v %s", url, code, err, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, b)
	}
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logs returns what the container wrote to stdout and stderr.
func (c *container) logs() string {
	cmdline := strings.Fields(os.Getenv("PODMAN"))
	if len(cmdline) == 0 {
		cmdline = []string{"podman"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, cmdline[0], append(cmdline[1:], "logs", c.name)...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("podman logs: %v\n%s", err, out)
	}
	return string(out)
}
