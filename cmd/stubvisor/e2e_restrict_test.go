package main

// Restricted APIs end to end (--http-restricted-api,
// --grpc-restricted-protocol): every route and RPC of every group, asked
// without the header, with a wrong value and with the right one.

import (
	"context"
	"io"
	"os/exec"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// restrictGroups are Triton's groups; each gets its own header here.
var restrictGroups = []string{"health", "metadata", "inference", "shared-memory", "model-config",
	"model-repository", "statistics", "trace", "logging"}

// restrictArgs restricts every group over HTTP and gRPC, group g behind
// header "key-<g>" with value "value-<g>".
func restrictArgs() []string {
	var args []string
	for _, g := range restrictGroups {
		args = append(args, "--http-restricted-api="+g+":key-"+g+"=value-"+g,
			"--grpc-restricted-protocol="+g+":key-"+g+"=value-"+g)
	}
	return args
}

func TestRestrictedHTTP(t *testing.T) {
	ipctest.RequirePython(t)
	s := startServer(t, copyRepo(t, "add_sub", "token_gen"), append(restrictArgs(), "--allow-client-shm=true")...)
	infer := `{"inputs":[{"name":"INPUT0","shape":[4],"datatype":"FP32","data":[1,2,3,4]},{"name":"INPUT1","shape":[4],"datatype":"FP32","data":[1,1,1,1]}]}`
	shm := `{"key":"/e2e-client-none","offset":0,"byte_size":16}`
	cases := []struct {
		group, method, path, body string
		want                      int // status with the right header
	}{
		{"health", "GET", "/v2/health/live", "", 200},
		{"health", "GET", "/v2/health/ready", "", 200},
		{"health", "GET", "/v2/models/add_sub/ready", "", 200},
		{"health", "GET", "/v2/models/add_sub/versions/1/ready", "", 200},
		{"metadata", "GET", "/v2", "", 200},
		{"metadata", "GET", "/v2/models/add_sub", "", 200},
		{"metadata", "GET", "/v2/models/add_sub/versions/1", "", 200},
		{"inference", "POST", "/v2/models/add_sub/infer", infer, 200},
		{"inference", "POST", "/v2/models/add_sub/versions/1/infer", infer, 200},
		{"inference", "POST", "/v2/models/token_gen/generate", `{"text_input":"a","max_tokens":1}`, 200},
		{"inference", "POST", "/v2/models/token_gen/generate_stream", `{"text_input":"a b","max_tokens":2}`, 200},
		{"shared-memory", "GET", "/v2/systemsharedmemory/status", "", 200},
		{"shared-memory", "GET", "/v2/systemsharedmemory/region/r/status", "", 404},
		{"shared-memory", "POST", "/v2/systemsharedmemory/region/r/register", shm, 500},
		{"shared-memory", "POST", "/v2/systemsharedmemory/unregister", "", 200},
		{"shared-memory", "POST", "/v2/systemsharedmemory/region/r/unregister", "", 200},
		{"shared-memory", "GET", "/v2/cudasharedmemory/status", "", 200},
		{"shared-memory", "POST", "/v2/cudasharedmemory/region/r/register", `{"raw_handle":{"b64":""},"device_id":0,"byte_size":16}`, 400},
		{"shared-memory", "POST", "/v2/cudasharedmemory/unregister", "", 200},
		{"model-config", "GET", "/v2/models/add_sub/config", "", 200},
		{"model-config", "GET", "/v2/models/add_sub/versions/1/config", "", 200},
		{"model-repository", "POST", "/v2/repository/index", "", 200},
		{"model-repository", "POST", "/v2/repository/models/add_sub/load", "", 503},
		{"model-repository", "POST", "/v2/repository/models/add_sub/unload", "", 503},
		{"statistics", "GET", "/v2/models/stats", "", 200},
		{"statistics", "GET", "/v2/models/add_sub/stats", "", 200},
		{"statistics", "GET", "/v2/models/add_sub/versions/1/stats", "", 200},
		{"statistics", "GET", "/v2/stubs", "", 200},
		{"statistics", "GET", "/v2/models/add_sub/stubs", "", 200},
		{"statistics", "GET", "/", "", 200},
		{"trace", "GET", "/v2/trace/setting", "", 200},
		{"trace", "GET", "/v2/models/add_sub/trace/setting", "", 200},
		{"logging", "GET", "/v2/logging", "", 200},
	}
	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.group] = true
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			want := "This API is restricted, expecting header 'key-" + c.group + "'"
			for _, hdr := range [][]string{nil, {"key-" + c.group, "wrong"}, {"key-" + c.group, ""}, {"key-other", "value-" + c.group}} {
				code, _, body := s.do(c.method, c.path, []byte(c.body), hdr...)
				if code != 403 || httpErrorText(t, body) != want {
					t.Errorf("header %q: %d %s, want 403 %q", hdr, code, body, want)
				}
			}
			code, _, body := s.do(c.method, c.path, []byte(c.body), "key-"+c.group, "value-"+c.group)
			if code != c.want {
				t.Errorf("with the header: %d %s, want %d", code, body, c.want)
			}
		})
	}
	for _, g := range restrictGroups {
		if !covered[g] {
			t.Errorf("group %s has no route in the table", g)
		}
	}
	t.Run("unknown path stays 404", func(t *testing.T) {
		if code, _, _ := s.do("GET", "/v2/nothing", nil); code != 404 {
			t.Errorf("got %d, want 404", code)
		}
	})
	t.Run("curl", func(t *testing.T) {
		if _, err := exec.LookPath("curl"); err != nil {
			t.Skip("no curl")
		}
		out, err := exec.Command("curl", "-s", "-w", " %{http_code}", s.HTTP+"/v2/models/add_sub/config").CombinedOutput()
		if err != nil || string(out) != `{"error":"This API is restricted, expecting header 'key-model-config'"} 403` {
			t.Errorf("curl without the header: %v %s", err, out)
		}
		out, err = exec.Command("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", "key-model-config: value-model-config",
			s.HTTP+"/v2/models/add_sub/config").CombinedOutput()
		if err != nil || string(out) != "200" {
			t.Errorf("curl with the header: %v %s", err, out)
		}
	})
}

// grpcCall is one RPC of the restriction table.
type grpcCall struct {
	group, method string
	req, resp     proto.Message
	stream        bool
}

func restrictedGRPCCalls() []grpcCall {
	const svc = "/inference.GRPCInferenceService/"
	f32 := func(vs ...any) []byte { return httpLE(vs...) }
	infer := &pb.ModelInferRequest{ModelName: "add_sub",
		Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "FP32", Shape: []int64{4}}, {Name: "INPUT1", Datatype: "FP32", Shape: []int64{4}}},
		RawInputContents: [][]byte{f32(float32(1), float32(2), float32(3), float32(4)), f32(float32(1), float32(1), float32(1), float32(1))}}
	return []grpcCall{
		{"health", svc + "ServerLive", &pb.ServerLiveRequest{}, &pb.ServerLiveResponse{}, false},
		{"health", svc + "ServerReady", &pb.ServerReadyRequest{}, &pb.ServerReadyResponse{}, false},
		{"health", svc + "ModelReady", &pb.ModelReadyRequest{Name: "add_sub"}, &pb.ModelReadyResponse{}, false},
		{"health", "/grpc.health.v1.Health/Check", &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{}, false},
		{"health", "/grpc.health.v1.Health/List", &healthpb.HealthListRequest{}, &healthpb.HealthListResponse{}, false},
		{"health", "/grpc.health.v1.Health/Watch", &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{}, true},
		{"metadata", svc + "ServerMetadata", &pb.ServerMetadataRequest{}, &pb.ServerMetadataResponse{}, false},
		{"metadata", svc + "ModelMetadata", &pb.ModelMetadataRequest{Name: "add_sub"}, &pb.ModelMetadataResponse{}, false},
		{"metadata", "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
			&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}},
			&reflectionpb.ServerReflectionResponse{}, true},
		{"inference", svc + "ModelInfer", infer, &pb.ModelInferResponse{}, false},
		{"inference", svc + "ModelStreamInfer", infer, &pb.ModelStreamInferResponse{}, true},
		{"shared-memory", svc + "SystemSharedMemoryStatus", &pb.SystemSharedMemoryStatusRequest{}, &pb.SystemSharedMemoryStatusResponse{}, false},
		{"shared-memory", svc + "SystemSharedMemoryRegister", &pb.SystemSharedMemoryRegisterRequest{Name: "r", Key: "/e2e-client-none", ByteSize: 16},
			&pb.SystemSharedMemoryRegisterResponse{}, false},
		{"shared-memory", svc + "SystemSharedMemoryUnregister", &pb.SystemSharedMemoryUnregisterRequest{}, &pb.SystemSharedMemoryUnregisterResponse{}, false},
		{"shared-memory", svc + "CudaSharedMemoryStatus", &pb.CudaSharedMemoryStatusRequest{}, &pb.CudaSharedMemoryStatusResponse{}, false},
		{"shared-memory", svc + "CudaSharedMemoryRegister", &pb.CudaSharedMemoryRegisterRequest{Name: "r", ByteSize: 16}, &pb.CudaSharedMemoryRegisterResponse{}, false},
		{"shared-memory", svc + "CudaSharedMemoryUnregister", &pb.CudaSharedMemoryUnregisterRequest{}, &pb.CudaSharedMemoryUnregisterResponse{}, false},
		{"model-config", svc + "ModelConfig", &pb.ModelConfigRequest{Name: "add_sub"}, &pb.ModelConfigResponse{}, false},
		{"model-repository", svc + "RepositoryIndex", &pb.RepositoryIndexRequest{}, &pb.RepositoryIndexResponse{}, false},
		{"model-repository", svc + "RepositoryModelLoad", &pb.RepositoryModelLoadRequest{ModelName: "add_sub"}, &pb.RepositoryModelLoadResponse{}, false},
		{"model-repository", svc + "RepositoryModelUnload", &pb.RepositoryModelUnloadRequest{ModelName: "add_sub"}, &pb.RepositoryModelUnloadResponse{}, false},
		{"statistics", svc + "ModelStatistics", &pb.ModelStatisticsRequest{}, &pb.ModelStatisticsResponse{}, false},
		{"trace", svc + "TraceSetting", &pb.TraceSettingRequest{}, &pb.TraceSettingResponse{}, false},
		{"logging", svc + "LogSettings", &pb.LogSettingsRequest{}, &pb.LogSettingsResponse{}, false},
	}
}

// invoke makes one call and returns its status: for a stream, the status
// of the first message read after sending req and closing the send side.
func (c grpcCall) invoke(ctx context.Context, conn *grpc.ClientConn) error {
	if !c.stream {
		return conn.Invoke(ctx, c.method, c.req, c.resp)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, c.method)
	if err != nil {
		return err
	}
	if err := st.SendMsg(c.req); err != nil && err != io.EOF {
		return err
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	return st.RecvMsg(c.resp)
}

func TestRestrictedGRPC(t *testing.T) {
	ipctest.RequirePython(t)
	s := startServer(t, copyRepo(t, "add_sub"), append(restrictArgs(), "--allow-client-shm=true")...)
	conn, _ := grpcClient(t, s)
	covered := map[string]bool{}
	for _, c := range restrictedGRPCCalls() {
		covered[c.group] = true
		t.Run(c.method, func(t *testing.T) {
			key := "triton-grpc-protocol-key-" + c.group
			want := "This protocol is restricted, expecting header '" + key + "'"
			for _, md := range []metadata.MD{nil, metadata.Pairs(key, "wrong"), metadata.Pairs("key-"+c.group, "value-"+c.group),
				metadata.Pairs("triton-grpc-protocol-key-other", "value-"+c.group)} {
				err := c.invoke(metadata.NewOutgoingContext(callCtx(t), md), conn)
				if st := status.Convert(err); st.Code() != codes.Unavailable || st.Message() != want {
					t.Errorf("metadata %v: %v, want UNAVAILABLE %q", md, err, want)
				}
			}
			err := c.invoke(metadata.NewOutgoingContext(callCtx(t), metadata.Pairs(key, "value-"+c.group)), conn)
			if strings.Contains(status.Convert(err).Message(), "restricted") {
				t.Errorf("with the header: %v", err)
			}
			if err != nil && c.method != "/inference.GRPCInferenceService/SystemSharedMemoryRegister" &&
				c.method != "/inference.GRPCInferenceService/CudaSharedMemoryRegister" &&
				!strings.Contains(c.method, "Repository") {
				t.Errorf("with the header: %v, want success", err)
			}
		})
	}
	for _, g := range restrictGroups {
		if !covered[g] {
			t.Errorf("group %s has no RPC in the table", g)
		}
	}
}

// TestRestrictedFlags: a bad --http-restricted-api or
// --grpc-restricted-protocol stops the server at start with
// tritonserver's message.
func TestRestrictedFlags(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--http-restricted-api=model-reposit,health:k1=v1"}, "unknown restricted api 'model-reposit'"},
		{[]string{"--grpc-restricted-protocol=model-reposit,health:k1=v1"}, "unknown restricted protocol 'model-reposit'"},
		{[]string{"--http-restricted-api=model-repository,health:k1=v1", "--http-restricted-api=metadata,health:k2=v2"},
			"restricted api 'health' can not be specified in multiple config groups"},
		{[]string{"--grpc-restricted-protocol=model-repository,health:k1=v1", "--grpc-restricted-protocol=metadata,health:k2=v2"},
			"restricted protocol 'health' can not be specified in multiple config groups"},
		{[]string{"--http-restricted-api=health:k1"}, "--http-restricted-api option format is '<config name>:<setting>=<value>'. Got health:k1"},
		{[]string{"--grpc-restricted-protocol=health:k1="}, "--grpc-restricted-protocol option format is"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			out, err := exec.Command(binPath, append([]string{"--model-repository", t.TempDir()}, c.args...)...).CombinedOutput()
			// tritonserver's test.sh counts the message: it must appear once.
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || strings.Count(string(out), c.want) != 1 {
				t.Errorf("got %v:\n%s\nwant exit 2 with %q once", err, out, c.want)
			}
		})
	}
}

// TestRestrictedOnlyNamedGroups: the groups not named stay open, whatever
// headers come with a request (NVIDIA's test_sanity), and a group's header
// opens only that group.
func TestRestrictedOnlyNamedGroups(t *testing.T) {
	s := startServer(t, t.TempDir(), "--http-restricted-api=model-repository:admin-key=admin-value",
		"--http-restricted-api=inference,metadata:infer-key=infer-value",
		"--grpc-restricted-protocol=model-repository:admin-key=admin-value",
		"--grpc-restricted-protocol=inference,health:infer-key=infer-value")
	for _, hdr := range [][]string{nil, {"infer-key", "infer-value"}, {"admin-key", "wrong"}} {
		if code, _, body := s.do("GET", "/v2/models/stats", nil, hdr...); code != 200 {
			t.Errorf("statistics with %q: %d %s", hdr, code, body)
		}
		if code, _, body := s.do("GET", "/v2/health/live", nil, hdr...); code != 200 {
			t.Errorf("health over HTTP with %q: %d %s", hdr, code, body)
		}
	}
	if code, _, body := s.do("POST", "/v2/repository/index", nil, "infer-key", "infer-value"); code != 403 ||
		httpErrorText(t, body) != "This API is restricted, expecting header 'admin-key'" {
		t.Errorf("index with the inference header: %d %s", code, body)
	}
	if code, _, body := s.do("GET", "/v2", nil, "infer-key", "infer-value"); code != 200 {
		t.Errorf("metadata with its header: %d %s", code, body)
	}
	_, client := grpcClient(t, s)
	if _, err := client.ModelStatistics(callCtx(t), &pb.ModelStatisticsRequest{}); err != nil {
		t.Errorf("gRPC statistics without metadata: %v", err)
	}
	if _, err := client.ServerMetadata(callCtx(t), &pb.ServerMetadataRequest{}); err != nil {
		t.Errorf("gRPC metadata (restricted over HTTP only): %v", err)
	}
	_, err := client.ServerLive(callCtx(t), &pb.ServerLiveRequest{})
	wantStatus(t, err, codes.Unavailable, "This protocol is restricted, expecting header 'triton-grpc-protocol-infer-key'")
	ctx := metadata.AppendToOutgoingContext(callCtx(t), "triton-grpc-protocol-infer-key", "infer-value")
	if _, err := client.ServerLive(ctx, &pb.ServerLiveRequest{}); err != nil {
		t.Errorf("gRPC health with its metadata: %v", err)
	}
	_, err = client.RepositoryModelUnload(ctx, &pb.RepositoryModelUnloadRequest{ModelName: "simple"})
	wantStatus(t, err, codes.Unavailable, "This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'")
	ctx = metadata.AppendToOutgoingContext(callCtx(t), "triton-grpc-protocol-admin-key", "admin-value")
	_, err = client.RepositoryModelUnload(ctx, &pb.RepositoryModelUnloadRequest{ModelName: "simple"})
	wantStatus(t, err, codes.Unavailable, "explicit model load / unload is not allowed if polling is enabled")
}
