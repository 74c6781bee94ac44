package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// chartDir is the Helm chart under test.
const chartDir = "../helm/stubvisor"

// helm runs the helm that make test-deploy built (HELM), or skips.
func helm(t *testing.T, args ...string) string {
	t.Helper()
	bin := os.Getenv("HELM")
	if bin == "" {
		t.Skip("HELM is not set: make test-deploy builds helm and sets it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// splitDocs splits a multi-document YAML stream, dropping empty ones.
func splitDocs(stream string) [][]byte {
	var docs [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(stream, -1) {
		var v any
		if err := yaml.Unmarshal([]byte(d), &v); err == nil && v != nil {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

// typeMeta is the apiVersion and kind of a manifest.
type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// kubeTypes are the Kubernetes API types the chart may render.
var kubeTypes = map[typeMeta]func() any{
	{"apps/v1", "Deployment"}:                      func() any { return &appsv1.Deployment{} },
	{"v1", "Service"}:                              func() any { return &corev1.Service{} },
	{"v1", "PersistentVolumeClaim"}:                func() any { return &corev1.PersistentVolumeClaim{} },
	{"policy/v1", "PodDisruptionBudget"}:           func() any { return &policyv1.PodDisruptionBudget{} },
	{"autoscaling/v2", "HorizontalPodAutoscaler"}:  func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
	{"monitoring.coreos.com/v1", "ServiceMonitor"}: func() any { return &monitoringv1.ServiceMonitor{} },
}

// decodeObjects decodes every document into its API type, with an error
// for an unknown kind, an unknown or misspelt field, a duplicate key or a
// value of the wrong type, and returns the objects by kind.
func decodeObjects(stream string) (map[string][]any, []error) {
	objs := map[string][]any{}
	var errs []error
	for _, doc := range splitDocs(stream) {
		var tm typeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			errs = append(errs, err)
			continue
		}
		newObj, ok := kubeTypes[tm]
		if !ok {
			errs = append(errs, fmt.Errorf("unexpected object %s %s", tm.APIVersion, tm.Kind))
			continue
		}
		obj := newObj()
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", tm.Kind, err))
			continue
		}
		objs[tm.Kind] = append(objs[tm.Kind], obj)
	}
	return objs, errs
}

// decodeStrict is decodeObjects that fails the test on any error.
func decodeStrict(t *testing.T, stream string) map[string][]any {
	t.Helper()
	objs, errs := decodeObjects(stream)
	for _, err := range errs {
		t.Errorf("%v in:\n%s", err, stream)
	}
	return objs
}

// TestStrictDecodeCatchesMistakes: the decoding above refuses what the
// API server would.
func TestStrictDecodeCatchesMistakes(t *testing.T) {
	for _, tc := range []struct{ name, doc string }{
		{"misspelt field", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replica: 1}\n"},
		{"wrong type", "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {ports: [{port: http}]}\n"},
		{"duplicate key", "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nmetadata: {name: y}\n"},
		{"unknown kind", "apiVersion: v1\nkind: Servise\nmetadata: {name: x}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, errs := decodeObjects(tc.doc); len(errs) == 0 {
				t.Errorf("accepted:\n%s", tc.doc)
			}
		})
	}
}

func TestHelmLint(t *testing.T) {
	helm(t, "lint", "--strict", chartDir)
	helm(t, "lint", "--strict", chartDir, "-f", "testdata/values-full.yaml")
}

// TestHelmTemplate renders the chart with the default values and with
// others, decodes every object strictly into the Kubernetes API types
// and checks what the objects say.
func TestHelmTemplate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		kinds []string
		check func(t *testing.T, objs map[string][]any)
	}{
		{"default values", nil, []string{"Deployment", "PodDisruptionBudget", "Service"}, checkDefault},
		{"every option on", []string{"-f", "testdata/values-full.yaml"},
			[]string{"Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Service", "ServiceMonitor"}, checkFull},
		{"a claim made by the chart", []string{"--set", "modelRepository.pvc.create=true", "--set", "podDisruptionBudget.enabled=false"},
			[]string{"Deployment", "PersistentVolumeClaim", "Service"}, checkPVC},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := helm(t, append([]string{"template", "rel", chartDir}, tc.args...)...)
			objs := decodeStrict(t, out)
			var kinds []string
			for k := range objs {
				kinds = append(kinds, k)
			}
			slices.Sort(kinds)
			if !slices.Equal(kinds, tc.kinds) {
				t.Fatalf("rendered kinds %v, want %v", kinds, tc.kinds)
			}
			dep := objs["Deployment"][0].(*appsv1.Deployment)
			checkPod(t, dep)
			tc.check(t, objs)
		})
	}
}

// checkPod checks what every rendering's pod must have: the hardened
// security context, the read-only model store, probes on the health
// endpoints, and a grace period that covers the exit timeout.
func checkPod(t *testing.T, dep *appsv1.Deployment) {
	t.Helper()
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("containers %+v", pod.Containers)
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 1000 || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("securityContext %+v", sc)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	if !mounts["models"].ReadOnly || mounts["tmp"].MountPath != "/tmp" {
		t.Errorf("volume mounts %+v", c.VolumeMounts)
	}
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
		want := map[string]string{"liveness": "/v2/health/live", "readiness": "/v2/health/ready", "startup": "/v2/health/ready"}[name]
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want || p.HTTPGet.Port.IntValue() != int(c.Ports[0].ContainerPort) {
			t.Errorf("%s probe %+v, want GET %s on the HTTP port", name, p, want)
		}
	}
	exitTimeout := argValue(t, c.Args, "--exit-timeout-secs")
	if pod.TerminationGracePeriodSeconds == nil || fmt.Sprint(*pod.TerminationGracePeriodSeconds-5) != exitTimeout {
		t.Errorf("terminationGracePeriodSeconds %v for --exit-timeout-secs=%s", pod.TerminationGracePeriodSeconds, exitTimeout)
	}
	if len(c.Command) != 0 || c.Args[0] != "tritonserver" {
		t.Errorf("command %v, args %v: want the args to start with tritonserver, as Triton's chart", c.Command, c.Args)
	}
}

// argValue returns the value of --name=value in args.
func argValue(t *testing.T, args []string, name string) string {
	t.Helper()
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	t.Fatalf("no %s in %v", name, args)
	return ""
}

func checkDefault(t *testing.T, objs map[string][]any) {
	dep := objs["Deployment"][0].(*appsv1.Deployment)
	pod := dep.Spec.Template.Spec
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 1 || len(pod.InitContainers) != 0 {
		t.Errorf("replicas %v, init containers %d", dep.Spec.Replicas, len(pod.InitContainers))
	}
	if v := pod.Volumes[0]; v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "model-repository" {
		t.Errorf("models volume %+v", v)
	}
	svc := objs["Service"][0].(*corev1.Service)
	ports := map[string]int32{}
	for _, p := range svc.Spec.Ports {
		ports[p.Name] = p.Port
	}
	if ports["http"] != 8000 || ports["grpc"] != 8001 || ports["metrics"] != 8002 {
		t.Errorf("service ports %v", ports)
	}
}

func checkFull(t *testing.T, objs map[string][]any) {
	dep := objs["Deployment"][0].(*appsv1.Deployment)
	pod := dep.Spec.Template.Spec
	if dep.Spec.Replicas != nil {
		t.Errorf("replicas %d set while the HPA scales", *dep.Spec.Replicas)
	}
	if len(pod.InitContainers) != 1 || pod.Volumes[0].EmptyDir == nil {
		t.Errorf("init containers %+v, volumes %+v", pod.InitContainers, pod.Volumes)
	}
	args := pod.Containers[0].Args
	for _, want := range []string{"--model-repository=/srv/models", "--drain-delay-secs=10", "--load-model=*", "--allow-sagemaker=false"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %v lack %s", args, want)
		}
	}
	hpa := objs["HorizontalPodAutoscaler"][0].(*autoscalingv2.HorizontalPodAutoscaler)
	m := hpa.Spec.Metrics[0]
	if hpa.Spec.MaxReplicas != 8 || m.Pods == nil || m.Pods.Metric.Name != "avg_time_queue_us" || m.Pods.Target.AverageValue.String() != "50" {
		t.Errorf("HPA %+v", hpa.Spec)
	}
	sm := objs["ServiceMonitor"][0].(*monitoringv1.ServiceMonitor)
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" || sm.Labels["release"] != "prometheus" {
		t.Errorf("ServiceMonitor %+v", sm)
	}
}

func checkPVC(t *testing.T, objs map[string][]any) {
	dep := objs["Deployment"][0].(*appsv1.Deployment)
	pvc := objs["PersistentVolumeClaim"][0].(*corev1.PersistentVolumeClaim)
	if claim := dep.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim; claim == nil || claim.ClaimName != pvc.Name {
		t.Errorf("the pod mounts %+v, the chart makes claim %s", claim, pvc.Name)
	}
}

// TestPrometheusAdapterValues: the adapter rule names the metric the HPA
// asks for and reads the server's metric names.
func TestPrometheusAdapterValues(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "helm", "prometheus-adapter-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Rules struct {
			Default bool `json:"default"`
			Custom  []struct {
				SeriesQuery string          `json:"seriesQuery"`
				Resources   json.RawMessage `json:"resources"`
				Name        struct {
					Matches string `json:"matches"`
					As      string `json:"as"`
				} `json:"name"`
				MetricsQuery string `json:"metricsQuery"`
			} `json:"custom"`
		} `json:"rules"`
	}
	if err := yaml.UnmarshalStrict(b, &v); err != nil {
		t.Fatal(err)
	}
	var values struct {
		Autoscaling struct {
			MetricName string `json:"metricName"`
		} `json:"autoscaling"`
	}
	b, err = os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	if len(v.Rules.Custom) != 1 || v.Rules.Custom[0].Name.As != values.Autoscaling.MetricName ||
		!strings.Contains(v.Rules.Custom[0].MetricsQuery, "nv_inference_queue_duration_us") ||
		!strings.Contains(v.Rules.Custom[0].MetricsQuery, "nv_inference_request_success") {
		t.Errorf("adapter rules %+v do not serve %q", v.Rules, values.Autoscaling.MetricName)
	}
}
