package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

// stubs is the part of /v2/stubs these tests read.
type stubs []struct {
	Model string `json:"model"`
	Stubs []struct {
		PID      int    `json:"pid"`
		State    string `json:"state"`
		Restarts int    `json:"restarts"`
	} `json:"stubs"`
}

// stubPID returns the pid (in the container) of the model's first stub
// when it is ready, or 0.
func (c *container) stubPID(model string) (pid, restarts int) {
	c.t.Helper()
	var all stubs
	getJSON(c.t, c.HTTP+"/v2/models/"+model+"/stubs", &all)
	for _, m := range all {
		for _, s := range m.Stubs {
			if s.State == "ready" {
				return s.PID, s.Restarts
			}
		}
	}
	return 0, 0
}

// TestImageKServe runs the image as KServe's kserve-tritonserver runtime
// does (its argument list, uid 1000, no capabilities, a read-only root
// filesystem and model store) with /dev/shm absent and of 64 MiB, and
// serves add_sub over HTTP and gRPC.
func TestImageKServe(t *testing.T) {
	repo := modelRepo(t, "add_sub")
	for _, tc := range []struct {
		name    string
		opts    []string
		shmLine *regexp.Regexp // the /dev/shm line of /proc/mounts; nil: none
	}{
		{"no /dev/shm", []string{"--ipc=none"}, nil},
		{"64 MiB /dev/shm", []string{"--shm-size=64m"}, regexp.MustCompile(` /dev/shm tmpfs .*size=65536k`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := runContainer(t, repo, append(append([]string{}, hardened...), tc.opts...), kserveArgs)
			t.Logf("container start to ready: %v", time.Since(c.started).Round(time.Millisecond))
			c.checkConfinement(t, "/mnt/models", tc.shmLine)
			c.checkHTTPInfer(t)
			c.checkGRPCInfer(t)
			var all stubs
			getJSON(t, c.HTTP+"/v2/stubs", &all)
			if len(all) != 1 || all[0].Model != "add_sub" || len(all[0].Stubs) != 1 || all[0].Stubs[0].PID <= 1 {
				t.Errorf("/v2/stubs: %+v", all)
			}
			code, metrics, err := httpDo("GET", c.Metrics+"/metrics", nil)
			// The HPA's queue time per request is made of these two.
			for _, want := range []*regexp.Regexp{
				regexp.MustCompile(`(?m)^nv_inference_request_success\{model="add_sub",version="1"\} 2$`),
				regexp.MustCompile(`(?m)^nv_inference_queue_duration_us\{model="add_sub",version="1"\} [0-9.e+]+$`),
			} {
				if err != nil || code != 200 || !want.Match(metrics) {
					t.Errorf("metrics on 8002: %d %v, want a line matching %s in:\n%s", code, err, want, metrics)
				}
			}
		})
	}
}

// checkConfinement checks the user, the capabilities, the read-only root
// filesystem and model store, and /dev/shm inside the container.
func (c *container) checkConfinement(t *testing.T, models string, shmLine *regexp.Regexp) {
	t.Helper()
	if out, err := c.exec("id", "-u"); err != nil || strings.TrimSpace(out) != "1000" {
		t.Errorf("id -u: %q %v", out, err)
	}
	for _, path := range []string{"/usr/local/bin/written", models + "/written"} {
		if _, err := c.exec("touch", path); err == nil || !strings.Contains(err.Error(), "Read-only file system") {
			t.Errorf("touch %s: %v, want a read-only file system", path, err)
		}
	}
	status, err := c.exec("cat", "/proc/1/status")
	if err != nil || !regexp.MustCompile(`(?m)^CapEff:\s+0+$`).MatchString(status) {
		t.Errorf("PID 1 has capabilities: %v\n%s", err, status)
	}
	mounts, err := c.exec("cat", "/proc/mounts")
	if err != nil {
		t.Fatal(err)
	}
	if shmLine == nil && strings.Contains(mounts, " /dev/shm ") {
		t.Errorf("/dev/shm is mounted:\n%s", mounts)
	}
	if shmLine != nil && !shmLine.MatchString(mounts) {
		t.Errorf("no mount matching %s:\n%s", shmLine, mounts)
	}
}

// checkHTTPInfer sends add_sub a request over HTTP.
func (c *container) checkHTTPInfer(t *testing.T) {
	t.Helper()
	req := `{"inputs":[{"name":"INPUT0","shape":[4],"datatype":"FP32","data":[1,2,3,4]},` +
		`{"name":"INPUT1","shape":[4],"datatype":"FP32","data":[10,20,30,40]}]}`
	code, body, err := httpDo("POST", c.HTTP+"/v2/models/add_sub/infer", []byte(req))
	if err != nil || code != 200 {
		t.Fatalf("HTTP infer: %d %v %s", code, err, body)
	}
	var resp struct {
		Outputs []struct {
			Name string    `json:"name"`
			Data []float32 `json:"data"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, o := range resp.Outputs {
		got[o.Name] = fmt.Sprint(o.Data)
	}
	if got["OUTPUT0"] != "[11 22 33 44]" || got["OUTPUT1"] != "[-9 -18 -27 -36]" {
		t.Errorf("HTTP infer outputs %v", got)
	}
}

// checkGRPCInfer sends add_sub a request over gRPC.
func (c *container) checkGRPCInfer(t *testing.T) {
	t.Helper()
	conn, err := grpc.NewClient(c.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := pb.NewGRPCInferenceServiceClient(conn)
	ready, err := client.ServerReady(ctx, &pb.ServerReadyRequest{})
	if err != nil || !ready.GetReady() {
		t.Fatalf("gRPC ServerReady: %v %v", ready, err)
	}
	in := func(name string, v ...float32) *pb.ModelInferRequest_InferInputTensor {
		return &pb.ModelInferRequest_InferInputTensor{Name: name, Datatype: "FP32", Shape: []int64{4},
			Contents: &pb.InferTensorContents{Fp32Contents: v}}
	}
	resp, err := client.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "add_sub",
		Inputs: []*pb.ModelInferRequest_InferInputTensor{in("INPUT0", 1, 2, 3, 4), in("INPUT1", 1, 1, 1, 1)}})
	if err != nil {
		t.Fatalf("gRPC infer: %v", err)
	}
	got := map[string]string{}
	for i, o := range resp.GetOutputs() {
		raw := resp.GetRawOutputContents()[i]
		var vals []string
		for j := 0; j+4 <= len(raw); j += 4 {
			bits := uint32(raw[j]) | uint32(raw[j+1])<<8 | uint32(raw[j+2])<<16 | uint32(raw[j+3])<<24
			vals = append(vals, strconv.FormatFloat(float64(math.Float32frombits(bits)), 'g', -1, 32))
		}
		got[o.GetName()] = strings.Join(vals, " ")
	}
	if got["OUTPUT0"] != "2 3 4 5" || got["OUTPUT1"] != "0 1 2 3" {
		t.Errorf("gRPC infer outputs %v", got)
	}
}
