package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// freePorts returns n TCP ports free on the host now.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return ports
}

// TestKubePlay runs the pod the chart renders with podman kube play: the
// model repository is a claim (a podman volume bound to a directory), the
// pod runs as uid 1000 with a read-only root filesystem, serves add_sub,
// and its liveness, readiness and startup probes pass. podman publishes
// each containerPort on the host, so the test renders the chart with
// ports that are free here.
func TestKubePlay(t *testing.T) {
	img := image(t)
	repo := modelRepo(t, "add_sub")
	release := fmt.Sprintf("kp%d", os.Getpid())
	claim := release + "-models"
	mustPodman(t, "volume", "create", "--opt", "type=none", "--opt", "o=bind", "--opt", "device="+repo, claim)
	t.Cleanup(func() {
		if _, err := podman(t, time.Minute, "volume", "rm", "-f", claim); err != nil {
			t.Error(err)
		}
	})
	ports := freePorts(t, 3)
	repository, tag := img, "latest"
	if i := lastColon(img); i > 0 {
		repository, tag = img[:i], img[i+1:]
	}
	manifest := helm(t, "template", release, chartDir, "--show-only", "templates/deployment.yaml",
		"--set", "image.repository="+repository, "--set", "image.tag="+tag, "--set", "image.pullPolicy=Never",
		"--set", "modelRepository.pvc.claimName="+claim,
		"--set", "service.httpPort="+strconv.Itoa(ports[0]), "--set", "service.grpcPort="+strconv.Itoa(ports[1]),
		"--set", "service.metricsPort="+strconv.Itoa(ports[2]))
	dep := decodeStrict(t, manifest)["Deployment"][0].(*appsv1.Deployment)
	file := filepath.Join(t.TempDir(), "deployment.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	mustPodman(t, "kube", "play", file)
	ctr := dep.Name + "-pod-0-" + dep.Spec.Template.Spec.Containers[0].Name
	c := &container{t: t, name: ctr, HTTP: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), started: started}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("container log:\n%s", c.logs())
		}
		if _, err := podman(t, 2*time.Minute, "kube", "down", file); err != nil {
			t.Error(err)
		}
	})
	spec := dep.Spec.Template.Spec.Containers[0]
	// The probes as the kubelet runs them: an HTTP GET on the pod's port.
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
	}{{"startup", spec.StartupProbe}, {"readiness", spec.ReadinessProbe}, {"liveness", spec.LivenessProbe}} {
		url := fmt.Sprintf("http://127.0.0.1:%d%s", p.probe.HTTPGet.Port.IntValue(), p.probe.HTTPGet.Path)
		budget := time.Duration(p.probe.PeriodSeconds*p.probe.FailureThreshold) * time.Second
		waitFor(t, budget, "the "+p.name+" probe "+url+" to pass", func() bool {
			code, _, err := httpDo("GET", url, nil)
			return err == nil && code >= 200 && code < 400
		})
	}
	t.Logf("kube play to ready: %v", time.Since(started).Round(time.Millisecond))
	// podman turns the liveness probe into the container's health check,
	// which runs curl inside the container.
	if _, err := podman(t, time.Minute, "healthcheck", "run", ctr); err != nil {
		t.Errorf("liveness health check: %v", err)
	}
	c.checkConfinement(t, dep.Spec.Template.Spec.Containers[0].VolumeMounts[0].MountPath, regexp.MustCompile(` /dev/shm `))
	c.checkHTTPInfer(t)
}

// lastColon returns the index of the tag separator of an image name, or -1.
func lastColon(img string) int {
	for i := len(img) - 1; i >= 0 && img[i] != '/'; i-- {
		if img[i] == ':' {
			return i
		}
	}
	return -1
}
