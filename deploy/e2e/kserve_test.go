package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// kserveVersion is the KServe release whose CRDs the manifests are
// checked against; its Go module holds them under config/crd.
const kserveVersion = "v0.16.0"

// kserveDir downloads KServe's module through the Go module proxy (once,
// into the module cache) and returns its directory.
func kserveDir(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", "github.com/kserve/kserve@"+kserveVersion)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go mod download kserve: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(stdout.Bytes(), &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download kserve: %v: %s", err, stdout.String())
	}
	return mod.Dir
}

// crdSchema is the structural schema and validator of one version of a
// KServe CRD.
type crdSchema struct {
	structural *structuralschema.Structural
	validator  validation.SchemaValidator
}

// loadCRD reads a CRD from KServe's config/crd/full and returns the
// schema of version.
func loadCRD(t *testing.T, dir, file, version string) crdSchema {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "config", "crd", "full", file))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name != version {
			continue
		}
		var internal apiextensions.JSONSchemaProps
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &internal, nil); err != nil {
			t.Fatal(err)
		}
		s, err := structuralschema.NewStructural(&internal)
		if err != nil {
			t.Fatalf("%s %s: %v", file, version, err)
		}
		validator, _, err := validation.NewSchemaValidator(&internal)
		if err != nil {
			t.Fatalf("%s %s: %v", file, version, err)
		}
		return crdSchema{structural: s, validator: validator}
	}
	t.Fatalf("%s has no version %s", file, version)
	return crdSchema{}
}

// problems validates a custom resource as the API server would on create:
// it must match the schema, and no field may be one the schema prunes (an
// unknown or misspelt field, which the server would drop silently).
func (s crdSchema) problems(obj map[string]any) []string {
	var out []string
	for _, e := range validation.ValidateCustomResource(field.NewPath(""), obj, s.validator) {
		out = append(out, "schema: "+e.Error())
	}
	var copied map[string]any // pruning edits what it walks
	if err := json.Unmarshal(must(json.Marshal(obj)), &copied); err != nil {
		return append(out, err.Error())
	}
	for _, path := range pruning.PruneWithOptions(copied, s.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}) {
		out = append(out, "field "+path+" is not in the schema")
	}
	var meta struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if err := yaml.UnmarshalStrict(must(json.Marshal(map[string]any{"metadata": obj["metadata"]})), &meta); err != nil || meta.Metadata.Name == "" {
		out = append(out, fmt.Sprintf("metadata %v: %v", obj["metadata"], err))
	}
	return out
}

// check decodes doc strictly and fails the test on every problem.
func (s crdSchema) check(t *testing.T, doc []byte) map[string]any {
	t.Helper()
	var obj map[string]any
	if err := yaml.UnmarshalStrict(doc, &obj); err != nil {
		t.Fatal(err)
	}
	for _, p := range s.problems(obj) {
		t.Error(p)
	}
	return obj
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// TestKServeManifests checks deploy/kserve against KServe's CRDs, and the
// runtime's container strictly against the Kubernetes Container type.
func TestKServeManifests(t *testing.T) {
	dir := kserveDir(t)
	runtimes := loadCRD(t, dir, "serving.kserve.io_clusterservingruntimes.yaml", "v1alpha1")
	isvcs := loadCRD(t, dir, "serving.kserve.io_inferenceservices.yaml", "v1beta1")

	b, err := os.ReadFile("../kserve/servingruntime.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rt := runtimes.check(t, b)
	var runtime struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			SupportedModelFormats []struct {
				Name    string `json:"name"`
				Version string `json:"version"`
			} `json:"supportedModelFormats"`
			ProtocolVersions []string         `json:"protocolVersions"`
			Containers       []map[string]any `json:"containers"`
			Volumes          []corev1.Volume  `json:"volumes"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(must(json.Marshal(rt)), &runtime); err != nil {
		t.Fatal(err)
	}
	var formats []string
	for _, f := range runtime.Spec.SupportedModelFormats {
		formats = append(formats, f.Name+"/"+f.Version)
	}
	if runtime.Kind != "ClusterServingRuntime" || !slices.Equal(formats, []string{"triton/2", "python/1"}) ||
		!slices.Equal(runtime.Spec.ProtocolVersions, []string{"v2", "grpc-v2"}) || len(runtime.Spec.Containers) != 1 {
		t.Fatalf("runtime %+v", runtime)
	}
	var c corev1.Container
	if err := yaml.UnmarshalStrict(must(json.Marshal(runtime.Spec.Containers[0])), &c); err != nil {
		t.Fatalf("container: %v", err)
	}
	if !slices.Equal(c.Args[:len(kserveArgs)], kserveArgs) {
		t.Errorf("args %v do not start with kserve-tritonserver's %v", c.Args, kserveArgs)
	}
	if c.LivenessProbe.HTTPGet.Path != "/v2/health/live" || c.ReadinessProbe.HTTPGet.Path != "/v2/health/ready" ||
		*c.SecurityContext.RunAsUser != 1000 || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Errorf("container %+v", c)
	}

	b, err = os.ReadFile("../kserve/inferenceservice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	isvc := isvcs.check(t, b)
	model := isvc["spec"].(map[string]any)["predictor"].(map[string]any)["model"].(map[string]any)
	if model["runtime"] != runtime.Metadata.Name || fmt.Sprint(model["modelFormat"]) != "map[name:triton]" {
		t.Errorf("the InferenceService's model %v does not use runtime %s", model, runtime.Metadata.Name)
	}
}

// TestKServeSchemaCatchesMistakes: the checks above fail on a misspelt
// field and on a value of the wrong type.
func TestKServeSchemaCatchesMistakes(t *testing.T) {
	dir := kserveDir(t)
	runtimes := loadCRD(t, dir, "serving.kserve.io_clusterservingruntimes.yaml", "v1alpha1")
	for _, tc := range []struct{ name, doc string }{
		{"misspelt field", "apiVersion: serving.kserve.io/v1alpha1\nkind: ClusterServingRuntime\nmetadata: {name: x}\nspec:\n  containers: [{name: c, image: i}]\n  protocolVersion: [v2]\n"},
		{"wrong type", "apiVersion: serving.kserve.io/v1alpha1\nkind: ClusterServingRuntime\nmetadata: {name: x}\nspec:\n  containers: [{name: c, image: i}]\n  supportedModelFormats: [{name: triton, priority: high}]\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var obj map[string]any
			if err := yaml.UnmarshalStrict([]byte(tc.doc), &obj); err != nil {
				t.Fatal(err)
			}
			if len(runtimes.problems(obj)) == 0 {
				t.Errorf("accepted:\n%s", tc.doc)
			}
		})
	}
}
