package main

import (
	"bufio"
	"bytes"
	stdgzip "compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/metadata"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// These tests cover behaviour that NVIDIA's QA tests (L0_http, L0_grpc,
// L0_parameters) check with their exact texts and status codes, and the
// tritonserver flags a Triton launch script passes.

// tritonIdentityModel is a Python model that returns each input it gets
// as the output of the same index.
const tritonIdentityModel = `import json
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.cfg = json.loads(args["model_config"])

    def execute(self, requests):
        out = []
        for r in requests:
            ts = []
            for i, inp in enumerate(self.cfg["input"]):
                t = pb_utils.get_input_tensor_by_name(r, inp["name"])
                if t is not None:
                    ts.append(pb_utils.Tensor(self.cfg["output"][i]["name"], t.as_numpy()))
            out.append(pb_utils.InferenceResponse(ts))
        return out
`

// tritonWriteIdentity writes an identity model with n inputs of one type
// and dims into repo.
func tritonWriteIdentity(t *testing.T, repo, name string, maxBatch int, dtype, dims string, n int) {
	t.Helper()
	var in, out []string
	for i := range n {
		in = append(in, fmt.Sprintf(`{ name: "INPUT%d" data_type: %s dims: %s }`, i, dtype, dims))
		out = append(out, fmt.Sprintf(`{ name: "OUTPUT%d" data_type: %s dims: %s }`, i, dtype, dims))
	}
	cfg := fmt.Sprintf("name: %q\nbackend: \"python\"\nmax_batch_size: %d\ninput [%s]\noutput [%s]\n",
		name, maxBatch, strings.Join(in, ","), strings.Join(out, ","))
	httpWriteModel(t, repo, name, cfg, map[string]string{"model.py": tritonIdentityModel})
}

func nested(depth int, leaf string) string {
	return strings.Repeat("[", depth) + leaf + strings.Repeat("]", depth)
}

func TestTritonHTTPTexts(t *testing.T) {
	ipctest.RequirePython(t)
	repo := t.TempDir()
	tritonWriteIdentity(t, repo, "zero_fp32", 8, "TYPE_FP32", "[ -1 ]", 1)
	tritonWriteIdentity(t, repo, "zero_3_fp32", 8, "TYPE_FP32", "[ -1 ]", 3)
	tritonWriteIdentity(t, repo, "zero_fp16", 0, "TYPE_FP16", "[ -1, -1 ]", 1)
	tritonWriteIdentity(t, repo, "zero_object", 8, "TYPE_STRING", "[ -1 ]", 1)
	tritonWriteIdentity(t, repo, "zero_object_1", 0, "TYPE_STRING", "[ 1 ]", 1)
	tritonWriteIdentity(t, repo, "zero_int64", 8, "TYPE_INT64", "[ -1 ]", 1)
	s := startServer(t, repo, "--http-max-input-size", "65536")

	jsonInput := func(shape string, data string) []byte {
		return []byte(`{"inputs":[{"name":"INPUT0","shape":` + shape + `,"datatype":"FP32","data":` + data + `}]}`)
	}
	oversized := append(jsonInput("[1]", "[1]"), bytes.Repeat([]byte(" "), 65536)...)
	var gz bytes.Buffer
	zw := stdgzip.NewWriter(&gz)
	zw.Write(oversized)
	zw.Close()
	tests := []struct {
		name   string
		model  string
		body   []byte
		header []string
		status int
		text   string
	}{
		{"raw request to a model of three inputs", "zero_3_fp32", make([]byte, 96), []string{"Inference-Header-Content-Length", "0"}, 400,
			"Raw request must only have 1 input (found 1) to be deduced but got 3 inputs in 'zero_3_fp32' model configuration"},
		{"raw request with two variable dimensions", "zero_fp16", make([]byte, 8), []string{"Inference-Header-Content-Length", "0"}, 400,
			"The shape of the raw input 'INPUT0' can not be deduced because there are more than one variable-sized dimension"},
		{"raw BYTES request to a model of many elements", "zero_object", []byte("427"), []string{"Inference-Header-Content-Length", "0"}, 400,
			"For BYTE datatype raw input 'INPUT0', the model must have input shape [1]"},
		{"raw BYTES request", "zero_object_1", []byte("427"), []string{"Inference-Header-Content-Length", "0"}, 200, "427"},
		{"raw request over the limit", "zero_fp32", make([]byte, 65540), []string{"Inference-Header-Content-Length", "0"}, 400,
			"Raw input has a byte_size (65540 bytes) that exceeds the maximum allowed value of 65536 bytes. Use --http-max-input-size to increase the limit."},
		{"JSON request over the limit", "zero_fp32", oversized, nil, 400,
			"request JSON size of " + fmt.Sprint(len(oversized)) + " bytes exceeds the maximum allowed input size of 65536 bytes. Use --http-max-input-size to increase the limit."},
		{"compressed request inflating over the limit", "zero_fp32", gz.Bytes(), []string{"Content-Encoding", "gzip"}, 400,
			"Decompressed data size exceeds the maximum allowed value of 65536 bytes. Use --http-max-input-size to increase the limit."},
		{"element count overflow", "zero_fp32", jsonInput("[16,1152921504606846978]", "[1.0]"), nil, 400,
			"invalid shape for input 'INPUT0': shape [16,1152921504606846978] causes total element count to exceed maximum size of 9223372036854775807"},
		{"byte size overflow", "zero_fp32", jsonInput("[4,1152921504606846978]", "[1.0]"), nil, 400,
			"byte size overflow for input 'INPUT0'"},
		{"negative dimension", "zero_fp32", jsonInput("[2,-5]", "[1.0]"), nil, 500,
			"Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer"},
		{"duplicate output names", "zero_fp32", []byte(`{"inputs":[{"name":"INPUT0","shape":[1,1],"datatype":"FP32","data":[[1]]}],"outputs":[{"name":"OUTPUT0"},{"name":"OUTPUT0"}]}`), nil, 400,
			"output 'OUTPUT0' already exists in request"},
		{"data nested 120 deep", "zero_int64", []byte(`{"inputs":[{"name":"INPUT0","shape":[1,1],"datatype":"INT64","data":` + nested(120, "123") + `}]}`), nil, 400,
			"JSON nesting depth exceeds maximum allowed limit (100)"},
		{"BYTES data nested 120 deep", "zero_object", []byte(`{"inputs":[{"name":"INPUT0","shape":[1,1],"datatype":"BYTES","data":` + nested(120, `"hello"`) + `}]}`), nil, 400,
			"JSON nesting depth exceeds maximum allowed limit (100)"},
		{"data nested 50 deep", "zero_int64", []byte(`{"inputs":[{"name":"INPUT0","shape":[1,1],"datatype":"INT64","data":` + nested(50, "123") + `}]}`), nil, 200, `"data":[123]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, body := s.do("POST", "/v2/models/"+tc.model+"/infer", tc.body, tc.header...)
			if code != tc.status || !strings.Contains(string(body), tc.text) {
				t.Fatalf("got %d %.300s\nwant %d containing %q", code, body, tc.status, tc.text)
			}
		})
	}

	// A client that sends a body far over the limit before it reads the
	// answer (as tritonclient does) gets the error, not a reset
	// connection: the server reads the rest before it answers.
	t.Run("body far over the limit gets the error response", func(t *testing.T) {
		conn, err := net.Dial("tcp", strings.TrimPrefix(s.HTTP, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		body := make([]byte, 8<<20)
		head := fmt.Sprintf("POST /v2/models/zero_fp32/infer HTTP/1.1\r\nHost: x\r\nInference-Header-Content-Length: 0\r\nContent-Length: %d\r\n\r\n", len(body))
		if _, err := conn.Write(append([]byte(head), body...)); err != nil {
			t.Fatalf("sending the body: %v", err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 400 || !strings.Contains(string(b), "Raw input has a byte_size (8388608 bytes) that exceeds the maximum allowed value of 65536 bytes.") {
			t.Fatalf("got %d %s", resp.StatusCode, b)
		}
	})

	t.Run("repository index with a deeply nested ready", func(t *testing.T) {
		code, _, body := s.do("POST", "/v2/repository/index", []byte(`{"ready":`+nested(30000, "true")+`}`))
		if code != 400 || httpErrorText(t, body) != "Invalid value for 'ready': expected a boolean" {
			t.Fatalf("got %d %.300s", code, body)
		}
		if code, _, _ := s.do("GET", "/v2/health/live", nil); code != 200 {
			t.Fatalf("server not live after the nested index request: %d", code)
		}
	})
}

func TestTritonGRPCDuplicateOutputAndCompression(t *testing.T) {
	ipctest.RequirePython(t)
	s := startServer(t, copyRepo(t, "e2e_echo"))
	_, client := grpcClient(t, s)
	req := func(outputs ...string) *pb.ModelInferRequest {
		r := &pb.ModelInferRequest{
			ModelName:        "e2e_echo",
			Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{2}}},
			RawInputContents: [][]byte{ipctest.FP32(1.5, -2)},
		}
		for _, o := range outputs {
			r.Outputs = append(r.Outputs, &pb.ModelInferRequest_InferRequestedOutputTensor{Name: o})
		}
		return r
	}
	_, err := client.ModelInfer(callCtx(t), req("OUTPUT0", "OUTPUT0"))
	wantStatus(t, err, codes.InvalidArgument, "output 'OUTPUT0' already exists in request")
	for _, algo := range []string{gzip.Name, "deflate"} {
		t.Run(algo, func(t *testing.T) {
			resp, err := client.ModelInfer(callCtx(t), req("OUTPUT0"), grpc.UseCompressor(algo))
			if err != nil {
				t.Fatalf("%s-compressed request: %v", algo, err)
			}
			if _, data := outputByName(t, resp, "OUTPUT0"); !bytes.Equal(data, ipctest.FP32(1.5, -2)) {
				t.Fatalf("OUTPUT0 = %x", data)
			}
		})
	}
}

func TestTritonHeaderForwarding(t *testing.T) {
	ipctest.RequirePython(t)
	s := startServer(t, copyRepo(t, "e2e_echo"),
		"--http-header-forward-pattern", "MY_HEADER.*", "--grpc-header-forward-pattern", "(?-i)MY_HEADER.*|^grpc_header")
	body := []byte(`{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","data":[1]}]}`)

	t.Run("http", func(t *testing.T) {
		code, h, b := s.do("POST", "/v2/models/e2e_echo/infer", body, "My_Header_1", "my value", "other_header", "x")
		r := httpDecodeInfer(t, code, h, b)
		if r.Parameters["my_header_1"] != "my value" || r.Parameters["other_header"] != nil {
			t.Fatalf("parameters %v, want my_header_1 forwarded and other_header not", r.Parameters)
		}
		code, _, b = s.do("POST", "/v2/models/e2e_echo/infer", body, "my_header_x", "1", "sequence_id", "5")
		if code != 200 {
			t.Fatalf("a reserved header the pattern does not match must pass: %d %s", code, b)
		}
	})
	t.Run("http reserved", func(t *testing.T) {
		s2 := startServer(t, copyRepo(t, "e2e_echo"), "--http-header-forward-pattern", ".*")
		code, _, b := s2.do("POST", "/v2/models/e2e_echo/infer", body, "triton_x", "1")
		if code != 400 || httpErrorText(t, b) != "Header 'triton_x' is reserved for Triton usage and cannot be forwarded." {
			t.Fatalf("got %d %s", code, b)
		}
	})

	_, client := grpcClient(t, s)
	greq := &pb.ModelInferRequest{
		ModelName:        "e2e_echo",
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{1}}},
		RawInputContents: [][]byte{ipctest.FP32(1)},
	}
	md := metadata.Pairs("my_header_1", "lower", "grpc_header", "g", "MY_HEADER_2", "upper")
	t.Run("grpc", func(t *testing.T) {
		ctx := metadata.NewOutgoingContext(callCtx(t), md)
		resp, err := client.ModelInfer(ctx, greq)
		if err != nil {
			t.Fatal(err)
		}
		p := resp.GetParameters()
		// gRPC metadata keys are lower case, so the case-sensitive
		// MY_HEADER.* matches none of them; grpc_header is forwarded.
		if p["grpc_header"].GetStringParam() != "g" || p["my_header_1"] != nil || p["my_header_2"] != nil {
			t.Fatalf("parameters %v", p)
		}
	})
	t.Run("grpc stream", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 30*time.Second)
		t.Cleanup(cancel)
		stream, err := client.ModelStreamInfer(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(greq); err != nil {
			t.Fatal(err)
		}
		r, err := stream.Recv()
		if err != nil || r.GetErrorMessage() != "" {
			t.Fatalf("stream response %v %v", r, err)
		}
		if r.GetInferResponse().GetParameters()["grpc_header"].GetStringParam() != "g" {
			t.Fatalf("stream parameters %v", r.GetInferResponse().GetParameters())
		}
		_ = stream.CloseSend()
	})
}

func TestTritonFlags(t *testing.T) {
	ipctest.RequirePython(t)
	t.Run("launch script spellings", func(t *testing.T) {
		s := startServer(t, copyRepo(t, "e2e_echo"), "--model-store", copyRepo(t, "add_sub"),
			"--backend-config=python,shm-default-byte-size=4194304", "--backend-config=python,shm-growth-byte-size=2097152",
			"--backend-config=python,shm-region-prefix-name=prefix", "--backend-config=python,stub-timeout-seconds=40",
			"--pinned-memory-pool-byte-size=0", "--cuda-memory-pool-byte-size", "0:0",
			"--backend-directory", "/opt/tritonserver/backends", "--strict-model-config=false", "--allow-metrics=false")
		code, _, b := s.do("POST", "/v2/models/e2e_echo/infer", []byte(`{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","data":[1]}]}`))
		if code != 200 {
			t.Fatalf("infer: %d %s", code, b)
		}
		log := s.Log()
		for _, want := range []string{"flag=pinned-memory-pool-byte-size=0", "flag=cuda-memory-pool-byte-size=0:0", "backend-config=python,shm-region-prefix-name=prefix"} {
			if !strings.Contains(log, want) {
				t.Errorf("log does not say %q is ignored:\n%s", want, log)
			}
		}
		if code, _, _ := s.do("GET", "/v2/models/add_sub/ready", nil); code != 200 {
			t.Errorf("the model of --model-store is not ready: %d", code)
		}
		if s.Metrics != "" {
			t.Errorf("--allow-metrics=false still serves metrics on %s", s.Metrics)
		}
	})
	for _, tc := range []struct {
		bad  []string
		want string // a line of the output
	}{
		{[]string{"--http-max-input-size=0"}, "Error: --http-max-input-size must be greater than 0."},
		{[]string{"--http-max-input-size=-1024"}, "Error: --http-max-input-size must be greater than 0."},
		{[]string{"--backend-config=python,shm-default-byte-size=lots"}, "stubvisor: invalid --backend-config \"python,shm-default-byte-size=lots\": shm-default-byte-size must be a positive number of bytes"},
		{[]string{"--http-header-forward-pattern", "(unclosed"}, ""},
		{[]string{"--grpc-infer-thread-count=1"}, `stubvisor: invalid value "1" for flag -grpc-infer-thread-count: invalid argument for --grpc_infer_thread_count. Must be in the range 2 to 128.`},
		{[]string{"--grpc-infer-thread-count=129"}, `stubvisor: invalid value "129" for flag -grpc-infer-thread-count: invalid argument for --grpc_infer_thread_count. Must be in the range 2 to 128.`},
	} {
		bad := tc.bad
		t.Run("refuses "+strings.Join(bad, " "), func(t *testing.T) {
			args := append([]string{"--model-repository", t.TempDir(), "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"}, bad...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			t.Cleanup(cancel)
			out, err := exec.CommandContext(ctx, binPath, args...).CombinedOutput()
			if err == nil || ctx.Err() != nil {
				t.Fatalf("started with %v (err %v):\n%s", bad, err, out)
			}
			if tc.want != "" && !slices.Contains(strings.Split(string(out), "\n"), tc.want) {
				t.Errorf("output has no line %q:\n%s", tc.want, out)
			}
		})
	}
}

// TestTritonExitOnError: as tritonserver, the server exits with an error
// when a model it loads at start fails, unless --exit-on-error=false (which
// every other test passes, see startServer, and which serves the others).
func TestTritonExitOnError(t *testing.T) {
	ipctest.RequirePython(t)
	repo := copyRepo(t, "add_sub", "init_fails")
	shmBefore := shmEntries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, binPath, "--model-repository", repo, "--address", "127.0.0.1",
		"--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", "--cache-dir", cacheDir)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || ctx.Err() != nil {
		t.Fatalf("want exit status 1, got %v:\n%s", err, out)
	}
	if want := "stubvisor: failed to load all models: init_fails"; !strings.Contains(string(out), want) {
		t.Errorf("output does not say %q:\n%s", want, out)
	}
	if strings.Contains(string(out), "stubvisor started") {
		t.Errorf("the server started serving before it exited:\n%s", out)
	}
	assertShmUnchanged(t, shmBefore)
}

func TestTritonLoadNewModelFromFiles(t *testing.T) {
	ipctest.RequirePython(t)
	s := startServer(t, t.TempDir(), "--model-control-mode", "explicit")
	model, err := os.ReadFile(filepath.Join("..", "..", "testdata", "models", "e2e_echo", "1", "model.py"))
	if err != nil {
		t.Fatal(err)
	}
	code, b := s.postJSON("/v2/repository/models/brand_new/load", map[string]any{"parameters": map[string]any{
		"config":          httpFP32ConfigJSON(),
		"file:1/model.py": base64.StdEncoding.EncodeToString(model),
	}})
	if code != 200 {
		t.Fatalf("load of a model no repository holds: %d %s", code, b)
	}
	code, _, b = s.do("POST", "/v2/models/brand_new/infer", []byte(`{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","data":[3]}]}`))
	if code != 200 || !strings.Contains(string(b), `"data":[3`) {
		t.Fatalf("infer on the new model: %d %s", code, b)
	}
	code, b = s.postJSON("/v2/repository/models/"+strings.Repeat("n", 10)+"/load", map[string]any{"parameters": map[string]any{
		"config": "{}", "file:" + strings.Repeat("A", 256): "YQ==",
	}})
	if want := "failed to load 'nnnnnnnnnn', failed to poll from model repository"; code != 500 || httpErrorText(t, b) != want {
		t.Fatalf("file name over NAME_MAX: %d %s, want 500 %q", code, b, want)
	}
	// A model that no repository holds, over HTTP and gRPC (NVIDIA's
	// lifecycle test reads this text).
	const unknown = "failed to load 'unknown_model', failed to poll from model repository"
	if code, b := s.postJSON("/v2/repository/models/unknown_model/load", map[string]any{}); code != 500 || httpErrorText(t, b) != unknown {
		t.Fatalf("HTTP load of an unknown model: %d %s, want 500 %q", code, b, unknown)
	}
	_, client := grpcClient(t, s)
	_, err = client.RepositoryModelLoad(callCtx(t), &pb.RepositoryModelLoadRequest{ModelName: "unknown_model"})
	wantStatus(t, err, codes.Internal, unknown)
	if code, _, _ := s.do("GET", "/v2/health/live", nil); code != 200 {
		t.Fatal("server not live after a refused load")
	}
	code, b = s.postJSON("/v2/repository/models/brand_new/load", map[string]any{"parameters": map[string]any{
		"config":          `{"backend":"python","max_batch_size":"many"}`,
		"file:1/model.py": base64.StdEncoding.EncodeToString(model),
	}})
	if code != 400 || !strings.Contains(string(b), "failed to load 'brand_new': Invalid config override: ") {
		t.Fatalf("invalid config override: %d %s", code, b)
	}
	waitFor(t, 10*time.Second, "the log to say the config override was invalid", func() bool {
		return strings.Contains(s.Log(), "Invalid config override")
	})
}

// TestTritonEnvWithoutMsgpack serves models whose EXECUTION_ENV_PATH
// interpreter cannot import msgpack (a conda-pack environment built for
// Triton has numpy and no msgpack): the stubs start on their own codec,
// and the chains call their steps by BLS, sync and async, through it.
func TestTritonEnvWithoutMsgpack(t *testing.T) {
	ipctest.RequirePython(t)
	blocker, err := filepath.Abs(filepath.Join("..", "..", "python", "tests", "nomsgpack"))
	if err != nil {
		t.Fatal(err)
	}
	env := filepath.Join(t.TempDir(), "triton_env")
	if err := os.MkdirAll(filepath.Join(env, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\nPYTHONPATH=\"$PYTHONPATH:" + blocker + "\" exec /usr/bin/python3 \"$@\"\n"
	if err := os.WriteFile(filepath.Join(env, "bin", "python3"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(env, "bin", "python3"), "-c", "import msgpack").CombinedOutput(); err == nil {
		t.Fatalf("the environment still imports msgpack: %s", out)
	}
	models := []string{"e2e_echo", "bls_chain", "bls_chain_async", "identity_fp32"}
	repo := copyRepo(t, models...)
	for _, m := range models {
		cfg, err := os.ReadFile(filepath.Join(repo, m, "config.pbtxt"))
		if err != nil {
			t.Fatal(err)
		}
		cfg = append(cfg, []byte(fmt.Sprintf("\nparameters { key: \"EXECUTION_ENV_PATH\" value { string_value: %q } }\n", env))...)
		if err := os.WriteFile(filepath.Join(repo, m, "config.pbtxt"), cfg, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := startServer(t, repo)
	code, _, b := s.do("POST", "/v2/models/e2e_echo/infer", []byte(`{"parameters":{"tag":"x"},"inputs":[{"name":"INPUT0","shape":[3],"datatype":"FP32","data":[1,2,3]}]}`))
	if code != 200 || !strings.Contains(string(b), `"data":[1.0,2.0,3.0]`) && !strings.Contains(string(b), `"data":[1,2,3]`) || !strings.Contains(string(b), `"tag":"x"`) {
		t.Fatalf("infer through the msgpack-less stub: %d %s", code, b)
	}
	for _, tc := range []struct{ model, shape string }{{"bls_chain", "[4]"}, {"bls_chain_async", "[1,4]"}} {
		for i := range 3 {
			code, _, b := s.do("POST", "/v2/models/"+tc.model+"/infer",
				[]byte(`{"inputs":[{"name":"INPUT0","shape":`+tc.shape+`,"datatype":"FP32","data":[1,2,3,4.5]}]}`))
			if code != 200 || !strings.Contains(string(b), `"data":[1.0,2.0,3.0,4.5]`) && !strings.Contains(string(b), `"data":[1,2,3,4.5]`) {
				t.Fatalf("%s through msgpack-less stubs, request %d: %d %s", tc.model, i, code, b)
			}
		}
	}
}

// TestTritonLifecycleTexts checks the log texts Triton's lifecycle tests
// look for (a model without model.py, a stub killed in initialize) and the
// reason label of nv_inference_request_failure.
func TestTritonLifecycleTexts(t *testing.T) {
	ipctest.RequirePython(t)
	repo := copyRepo(t, "execute_raises")
	httpWriteModel(t, repo, "non_existent_model", httpFP32Config("non_existent_model", ""), nil)
	writeFP32Model(t, repo, "init_exit", "instance_group [{ kind: KIND_CPU }]", `import os
import signal


class TritonPythonModel:
    def initialize(self, args):
        os.kill(os.getpid(), signal.SIGKILL)

    def execute(self, requests):
        pass
`)
	s := startServer(t, repo, "--disable-auto-complete-config")
	log := s.Log()
	for _, want := range []string{
		"Failed to preinitialize Python stub: Python model file not found in '" + filepath.Join(repo, "non_existent_model", "1", "model.py") + "'",
		"failed to load 'non_existent_model'",
		"Stub process 'init_exit_0_0' is not healthy.",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	body := []byte(`{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","data":[1]}]}`)
	for range 2 {
		if code, _, b := s.do("POST", "/v2/models/execute_raises/infer", body); code == 200 {
			t.Fatalf("execute_raises answered 200: %s", b)
		}
	}
	// A request for a model that does not exist fails before Triton has a
	// request or a model to count it on (TRITONSERVER_InferenceRequestNew
	// fails in GetModel), so nothing is counted: no series names it and
	// no other model's count moves.
	if code, _, b := s.do("POST", "/v2/models/no_such_model/infer", body); code == 200 {
		t.Fatalf("no_such_model answered 200: %s", b)
	}
	_, c := grpcClient(t, s)
	if _, err := c.ModelInfer(callCtx(t), &pb.ModelInferRequest{ModelName: "no_such_model"}); err == nil {
		t.Fatal("gRPC infer of no_such_model succeeded")
	}
	metrics, _ := s.scrape()
	for _, want := range []string{
		`nv_inference_request_failure{model="execute_raises",reason="BACKEND",version="1"} 2`,
		`nv_inference_request_failure{model="execute_raises",reason="REJECTED",version="1"} 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(metrics, "no_such_model") {
		t.Errorf("metrics count requests for a model that does not exist:\n%s", metrics)
	}
}

// TestTritonClassification covers L0_parameters' class_count cases: top
// classes of an FP32 output, a BYTES output refused, and an output over a
// million elements refused, over HTTP and gRPC.
func TestTritonClassification(t *testing.T) {
	ipctest.RequirePython(t)
	repo := t.TempDir()
	tritonWriteIdentity(t, repo, "identity_fp32", 8, "TYPE_FP32", "[ -1 ]", 1)
	tritonWriteIdentity(t, repo, "identity_bytes", 8, "TYPE_STRING", "[ -1 ]", 1)
	s := startServer(t, repo)
	infer := func(model, dtype string, n int, data string) (int, string) {
		body := fmt.Sprintf(`{"inputs":[{"name":"INPUT0","shape":[1,%d],"datatype":%q,"data":%s}],"outputs":[{"name":"OUTPUT0","parameters":{"classification":5}}]}`, n, dtype, data)
		code, _, b := s.do("POST", "/v2/models/"+model+"/infer", []byte(body))
		return code, string(b)
	}
	ones := "[" + strings.TrimSuffix(strings.Repeat("1,", 8), ",") + "]"
	if code, b := infer("identity_fp32", "FP32", 8, ones); code != 200 || !strings.Contains(b, `"shape":[1,5]`) || !strings.Contains(b, `"1.000000:0"`) {
		t.Fatalf("classification: %d %s", code, b)
	}
	if code, b := infer("identity_bytes", "BYTES", 2, `["a","b"]`); code != 400 || !strings.Contains(b, "class result not available for output due to unsupported type 'BYTES'") {
		t.Fatalf("BYTES classification: %d %s", code, b)
	}
	const big = 1_000_001
	_, client := grpcClient(t, s)
	resp, err := client.ModelInfer(callCtx(t), &pb.ModelInferRequest{
		ModelName:        "identity_fp32",
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{1, big}}},
		RawInputContents: [][]byte{make([]byte, 4*big)},
		Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT0",
			Parameters: map[string]*pb.InferParameter{"classification": int64Param(5)}}},
	})
	if err == nil {
		t.Fatalf("a classification of %d elements answered %v", big, resp.GetOutputs())
	}
	wantStatus(t, err, codes.InvalidArgument, "classification output tensor too large")
}

// TestTritonStubProcessName: a Python stub's command line names it as
// Triton's stub, so that pgrep -f triton_python_backend_stub finds it (as
// NVIDIA's model_readiness test and users' scripts do), with its instance.
func TestTritonStubProcessName(t *testing.T) {
	ipctest.RequirePython(t)
	pgrep, err := exec.LookPath("pgrep")
	if err != nil {
		t.Skip("needs pgrep")
	}
	s := startServer(t, copyRepo(t, "identity_fp32"))
	stub := oneStub(t, s, "identity_fp32")
	out, err := exec.Command(pgrep, "-f", "triton_python_backend_stub").Output()
	if err != nil {
		t.Fatalf("pgrep: %v", err)
	}
	if !slices.Contains(strings.Fields(string(out)), strconv.Itoa(stub.PID)) {
		t.Errorf("pgrep -f triton_python_backend_stub gives %q, not the stub %d", out, stub.PID)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", stub.PID))
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	if len(args) < 2 || !slices.Equal(args[len(args)-2:], []string{"triton_python_backend_stub", stub.Instance}) {
		t.Errorf("stub command line %q", args)
	}
}
