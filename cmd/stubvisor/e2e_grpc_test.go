package main

// End-to-end tests of the gRPC front end: the built binary, real models,
// a grpc-go client on loopback.

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// grpcSuite is what the cases of TestGRPC share: one server and what
// it was started with.
type grpcSuite struct {
	s    *server
	repo string
	conn *grpc.ClientConn
	c    pb.GRPCInferenceServiceClient
}

// grpcCases are TestGRPC's named cases, run in order against one server.
var grpcCases = []struct {
	name string
	run  func(t *testing.T, e grpcSuite)
}{
	{"health", grpcHealth},
	{"reflection", grpcReflection},
	{"model metadata config ready", grpcModelMetadataConfigReady},
	{"add_sub raw", grpcAddSubRaw},
	{"every dtype raw", grpcEveryDtypeRaw},
	{"every dtype typed contents", grpcEveryDtypeTypedContents},
	{"bad requests", grpcBadRequests},
	{"stream decoupled", grpcStreamDecoupled},
	{"stream non-decoupled", grpcStreamNonDecoupled},
	{"stream triton_grpc_error", grpcStreamTritonGrpcError},
	{"statistics", grpcStatistics},
	{"repository", grpcRepository},
	{"system shared memory", grpcSystemSharedMemory},
	{"log and trace settings", grpcLogAndTraceSettings},
	{"large message", grpcLargeMessage},
}

func TestGRPC(t *testing.T) {
	ipctest.RequirePython(t)
	repo := copyRepo(t, "add_sub", "identity_all", "identity_fp32", "repeat_decoupled")
	s := startServer(t, repo, "--model-control-mode", "explicit", "--load-model", "*", "--allow-client-shm")
	conn, c := grpcClient(t, s)
	e := grpcSuite{s: s, repo: repo, conn: conn, c: c}
	for _, c := range grpcCases {
		t.Run(c.name, func(t *testing.T) { c.run(t, e) })
	}
}

// grpcHealth is the case "health" of TestGRPC.
func grpcHealth(t *testing.T, e grpcSuite) {
	conn, c := e.conn, e.c
	ctx := callCtx(t)
	live, err := c.ServerLive(ctx, &pb.ServerLiveRequest{})
	if err != nil || !live.Live {
		t.Fatalf("ServerLive: %v %v", live, err)
	}
	ready, err := c.ServerReady(ctx, &pb.ServerReadyRequest{})
	if err != nil || !ready.Ready {
		t.Fatalf("ServerReady: %v %v", ready, err)
	}
	md, err := c.ServerMetadata(ctx, &pb.ServerMetadataRequest{})
	if err != nil || md.Name != "triton" || md.Version == "" || !slices.Contains(md.Extensions, "model_repository") {
		t.Fatalf("ServerMetadata: %v %v", md, err)
	}
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health Check: %v %v", h, err)
	}
}

// grpcReflection is the case "reflection" of TestGRPC.
func grpcReflection(t *testing.T, e grpcSuite) {
	conn := e.conn
	rc, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(callCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := rc.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, svc := range resp.GetListServicesResponse().GetService() {
		names = append(names, svc.Name)
	}
	for _, want := range []string{"inference.GRPCInferenceService", "grpc.health.v1.Health"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, want %s", names, want)
		}
	}
	// The descriptor of the service resolves too (what grpcurl needs).
	if err := rc.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "inference.GRPCInferenceService"}}); err != nil {
		t.Fatal(err)
	}
	resp, err = rc.Recv()
	if err != nil || len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Fatalf("file descriptor: %v %v", resp, err)
	}
	_ = rc.CloseSend()
}

// grpcModelMetadataConfigReady is the case "model metadata config ready" of TestGRPC.
func grpcModelMetadataConfigReady(t *testing.T, e grpcSuite) {
	c := e.c
	ctx := callCtx(t)
	md, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "add_sub"})
	if err != nil {
		t.Fatal(err)
	}
	if md.Name != "add_sub" || md.Platform != "python" || !slices.Equal(md.Versions, []string{"1"}) ||
		len(md.Inputs) != 2 || md.Inputs[0].Datatype != "FP32" || !slices.Equal(md.Inputs[0].Shape, []int64{4}) {
		t.Fatalf("metadata: %v", md)
	}
	cfg, err := c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "repeat_decoupled", Version: "1"})
	if err != nil || cfg.Config.Name != "repeat_decoupled" || !cfg.Config.GetModelTransactionPolicy().GetDecoupled() {
		t.Fatalf("config: %v %v", cfg, err)
	}
	for _, tc := range []struct {
		name, model, version string
		ready                bool
	}{
		{"loaded", "add_sub", "", true},
		{"loaded version", "add_sub", "1", true},
		{"missing version", "add_sub", "7", false},
		{"unknown model", "nope", "", false},
	} {
		r, err := c.ModelReady(ctx, &pb.ModelReadyRequest{Name: tc.model, Version: tc.version})
		if err != nil || r.Ready != tc.ready {
			t.Errorf("%s: ready %v, %v; want %v", tc.name, r.GetReady(), err, tc.ready)
		}
	}
	_, err = c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "nope"})
	wantStatus(t, err, codes.InvalidArgument, "Request for unknown model: 'nope' is not found")
	_, err = c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "add_sub", Version: "x"})
	wantStatus(t, err, codes.InvalidArgument, "failed to get model version from specified version string 'x'")
}

// grpcAddSubRaw is the case "add_sub raw" of TestGRPC.
func grpcAddSubRaw(t *testing.T, e grpcSuite) {
	c := e.c
	r, err := c.ModelInfer(callCtx(t), &pb.ModelInferRequest{
		ModelName: "add_sub", Id: "req-1",
		Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "FP32", Shape: []int64{4}},
			{Name: "INPUT1", Datatype: "FP32", Shape: []int64{4}},
		},
		Outputs:          []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT1"}, {Name: "OUTPUT0"}},
		RawInputContents: [][]byte{ipctest.FP32(1, 2, 3, 4), ipctest.FP32(10, 20, 30, 40)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Id != "req-1" || r.ModelName != "add_sub" || r.ModelVersion != "1" {
		t.Fatalf("response header: %v", r)
	}
	o0, raw0 := outputByName(t, r, "OUTPUT0")
	_, raw1 := outputByName(t, r, "OUTPUT1")
	if o0.Datatype != "FP32" || !slices.Equal(o0.Shape, []int64{4}) ||
		!bytes.Equal(raw0, ipctest.FP32(11, 22, 33, 44)) || !bytes.Equal(raw1, ipctest.FP32(-9, -18, -27, -36)) {
		t.Fatalf("outputs %v: %x %x", r.Outputs, raw0, raw1)
	}
}

// grpcEveryDtypeRaw is the case "every dtype raw" of TestGRPC.
func grpcEveryDtypeRaw(t *testing.T, e grpcSuite) {
	c := e.c
	type tensor struct {
		dtype string
		shape []int64
		data  []byte
	}
	in := map[string]tensor{
		"BOOL":   {"BOOL", []int64{3}, []byte{1, 0, 1}},
		"UINT8":  {"UINT8", []int64{2}, []byte{0, 255}},
		"UINT16": {"UINT16", []int64{2}, []byte{1, 0, 255, 255}},
		"UINT32": {"UINT32", []int64{1}, []byte{1, 2, 3, 4}},
		"UINT64": {"UINT64", []int64{1}, []byte{1, 2, 3, 4, 5, 6, 7, 255}},
		"INT8":   {"INT8", []int64{2}, []byte{0x80, 0x7f}},
		"INT16":  {"INT16", []int64{1}, []byte{0x00, 0x80}},
		"INT32":  {"INT32", []int64{2}, ipctest.INT32(-1, 7)},
		"INT64":  {"INT64", []int64{1}, []byte{0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		"FP16":   {"FP16", []int64{2}, []byte{0x00, 0x3c, 0x00, 0xc0}},
		"FP32":   {"FP32", []int64{3}, ipctest.FP32(1.5, -2, 0)},
		"FP64":   {"FP64", []int64{1}, binary.LittleEndian.AppendUint64(nil, math.Float64bits(math.Pi))},
		"STRING": {"BYTES", []int64{3}, ipctest.BYTES("a", "", "héllo\x00world")},
		"BF16":   {"BF16", []int64{1}, []byte{0x80, 0x3f}},
	}
	req := &pb.ModelInferRequest{ModelName: "identity_all"}
	for suffix, tn := range in {
		req.Inputs = append(req.Inputs, &pb.ModelInferRequest_InferInputTensor{Name: "INPUT_" + suffix, Datatype: tn.dtype, Shape: tn.shape})
		req.RawInputContents = append(req.RawInputContents, tn.data)
	}
	r, err := c.ModelInfer(callCtx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Outputs) != len(in) {
		t.Fatalf("%d outputs, want %d", len(r.Outputs), len(in))
	}
	for suffix, tn := range in {
		o, raw := outputByName(t, r, "OUTPUT_"+suffix)
		if o.Datatype != tn.dtype || !slices.Equal(o.Shape, tn.shape) || !bytes.Equal(raw, tn.data) {
			t.Errorf("%s: got %s %v %x, want %s %v %x", suffix, o.Datatype, o.Shape, raw, tn.dtype, tn.shape, tn.data)
		}
	}
}

// grpcEveryDtypeTypedContents is the case "every dtype typed contents" of TestGRPC.
func grpcEveryDtypeTypedContents(t *testing.T, e grpcSuite) {
	c := e.c
	for _, tc := range []struct {
		suffix, dtype string
		contents      *pb.InferTensorContents
		want          []byte
	}{
		{"BOOL", "BOOL", &pb.InferTensorContents{BoolContents: []bool{true, false, true}}, []byte{1, 0, 1}},
		{"UINT8", "UINT8", &pb.InferTensorContents{UintContents: []uint32{0, 255}}, []byte{0, 255}},
		{"UINT16", "UINT16", &pb.InferTensorContents{UintContents: []uint32{1, 65535}}, []byte{1, 0, 255, 255}},
		{"UINT32", "UINT32", &pb.InferTensorContents{UintContents: []uint32{0x04030201}}, []byte{1, 2, 3, 4}},
		{"UINT64", "UINT64", &pb.InferTensorContents{Uint64Contents: []uint64{math.MaxUint64}}, bytes.Repeat([]byte{255}, 8)},
		{"INT8", "INT8", &pb.InferTensorContents{IntContents: []int32{-128, 127}}, []byte{0x80, 0x7f}},
		{"INT16", "INT16", &pb.InferTensorContents{IntContents: []int32{-32768}}, []byte{0x00, 0x80}},
		{"INT32", "INT32", &pb.InferTensorContents{IntContents: []int32{-1, 7}}, ipctest.INT32(-1, 7)},
		{"INT64", "INT64", &pb.InferTensorContents{Int64Contents: []int64{-2}}, []byte{0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{"FP32", "FP32", &pb.InferTensorContents{Fp32Contents: []float32{1.5, -2}}, ipctest.FP32(1.5, -2)},
		{"FP64", "FP64", &pb.InferTensorContents{Fp64Contents: []float64{math.Pi}}, binary.LittleEndian.AppendUint64(nil, math.Float64bits(math.Pi))},
		{"STRING", "BYTES", &pb.InferTensorContents{BytesContents: [][]byte{[]byte("x"), {}, []byte("yz")}}, ipctest.BYTES("x", "", "yz")},
	} {
		t.Run(tc.suffix, func(t *testing.T) {
			n := int64(len(tc.want) / max(1, map[string]int{"BOOL": 1, "UINT8": 1, "UINT16": 2, "UINT32": 4, "UINT64": 8, "INT8": 1, "INT16": 2, "INT32": 4, "INT64": 8, "FP32": 4, "FP64": 8}[tc.dtype]))
			if tc.dtype == "BYTES" {
				n = int64(len(tc.contents.BytesContents))
			}
			r, err := c.ModelInfer(callCtx(t), &pb.ModelInferRequest{
				ModelName: "identity_all",
				Inputs:    []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT_" + tc.suffix, Datatype: tc.dtype, Shape: []int64{n}, Contents: tc.contents}},
				Outputs:   []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT_" + tc.suffix}},
			})
			if err != nil {
				t.Fatal(err)
			}
			o, raw := outputByName(t, r, "OUTPUT_"+tc.suffix)
			if o.Datatype != tc.dtype || !slices.Equal(o.Shape, []int64{n}) || !bytes.Equal(raw, tc.want) {
				t.Fatalf("got %s %v %x, want %s [%d] %x", o.Datatype, o.Shape, raw, tc.dtype, n, tc.want)
			}
		})
	}
}

// grpcBadRequests is the case "bad requests" of TestGRPC.
func grpcBadRequests(t *testing.T, e grpcSuite) {
	c := e.c
	fp := func(name string, shape ...int64) *pb.ModelInferRequest_InferInputTensor {
		return &pb.ModelInferRequest_InferInputTensor{Name: name, Datatype: "FP32", Shape: shape}
	}
	good := func() *pb.ModelInferRequest {
		return &pb.ModelInferRequest{ModelName: "add_sub",
			Inputs:           []*pb.ModelInferRequest_InferInputTensor{fp("INPUT0", 4), fp("INPUT1", 4)},
			RawInputContents: [][]byte{ipctest.FP32(1, 2, 3, 4), ipctest.FP32(1, 2, 3, 4)}}
	}
	for _, tc := range []struct {
		name   string
		mutate func(r *pb.ModelInferRequest)
		code   codes.Code
		text   string
	}{
		{"unknown model", func(r *pb.ModelInferRequest) { r.ModelName = "nope" }, codes.InvalidArgument, "Request for unknown model: 'nope' is not found"},
		{"unknown version", func(r *pb.ModelInferRequest) { r.ModelVersion = "9" }, codes.NotFound, "Request for unknown model: 'add_sub' version 9 is not found"},
		{"bad version", func(r *pb.ModelInferRequest) { r.ModelVersion = "v1" }, codes.InvalidArgument, "failed to get model version from specified version string 'v1'"},
		{"wrong dtype", func(r *pb.ModelInferRequest) { r.Inputs[0].Datatype = "INT32" }, codes.InvalidArgument, "inference input 'INPUT0' data-type is 'INT32', but model 'add_sub' expects 'FP32'"},
		{"wrong shape", func(r *pb.ModelInferRequest) { r.Inputs[1].Shape = []int64{2, 2} }, codes.InvalidArgument, "unexpected shape for input 'INPUT1' for model 'add_sub'. Expected [4], got [2,2]"},
		{"wrong byte size", func(r *pb.ModelInferRequest) { r.RawInputContents[0] = ipctest.FP32(1, 2, 3) }, codes.InvalidArgument, "input byte size mismatch for input 'INPUT0' for model 'add_sub'. Expected 16, got 12"},
		{"contents and raw", func(r *pb.ModelInferRequest) {
			r.Inputs[1].Contents = &pb.InferTensorContents{Fp32Contents: []float32{1, 2, 3, 4}}
		}, codes.InvalidArgument, "contents field must not be specified when using raw_input_contents for 'INPUT1' for model 'add_sub'"},
		{"missing data", func(r *pb.ModelInferRequest) { r.RawInputContents = r.RawInputContents[:1] }, codes.InvalidArgument, "unable to find data for input tensor 'INPUT1' for model 'add_sub' in request."},
		{"contents of another type", func(r *pb.ModelInferRequest) {
			r.RawInputContents = nil
			r.Inputs[0].Contents = &pb.InferTensorContents{IntContents: []int32{1, 2, 3, 4}}
			r.Inputs[1].Contents = &pb.InferTensorContents{Fp32Contents: []float32{1, 2, 3, 4}}
		}, codes.InvalidArgument, "unexpected explicit tensor data for input tensor 'INPUT0' for model 'add_sub' of type 'INT32', expected datatype 'FP32'"},
		{"missing input", func(r *pb.ModelInferRequest) { r.Inputs = r.Inputs[:1]; r.RawInputContents = r.RawInputContents[:1] }, codes.InvalidArgument, "expected 2 inputs but got 1 inputs for model 'add_sub'"},
		// The count is checked before each input, as Triton's core does.
		{"missing input, the other of a wrong type", func(r *pb.ModelInferRequest) {
			r.Inputs, r.RawInputContents = r.Inputs[:1], r.RawInputContents[:1]
			r.Inputs[0].Datatype = "INT32"
		}, codes.InvalidArgument, "expected 2 inputs but got 1 inputs for model 'add_sub'. Got input(s) ['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all required input(s)."},
		{"unknown output", func(r *pb.ModelInferRequest) {
			r.Outputs = []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "NOPE"}}
		}, codes.InvalidArgument, "unexpected inference output 'NOPE' for model 'add_sub'"},
		{"reserved parameter", func(r *pb.ModelInferRequest) {
			r.Parameters = map[string]*pb.InferParameter{"triton_x": boolParam(true)}
		}, codes.InvalidArgument, "parameter keys starting with 'triton_' are reserved for Triton usage."},
		{"sequence_id type", func(r *pb.ModelInferRequest) {
			r.Parameters = map[string]*pb.InferParameter{"sequence_id": boolParam(true)}
		}, codes.InvalidArgument, "invalid value type for 'sequence_id' parameter, expected int64_param or string_param."},
		{"decoupled model", func(r *pb.ModelInferRequest) {
			r.ModelName = "repeat_decoupled"
			r.Inputs = []*pb.ModelInferRequest_InferInputTensor{
				{Name: "IN", Datatype: "INT32", Shape: []int64{1}},
				{Name: "DELAY", Datatype: "UINT32", Shape: []int64{1}},
				{Name: "WAIT", Datatype: "UINT32", Shape: []int64{1}},
			}
			r.RawInputContents = [][]byte{ipctest.INT32(1), ipctest.INT32(0), ipctest.INT32(0)}
		}, codes.Unimplemented, "ModelInfer RPC doesn't support models with decoupled transaction policy"},
		{"unknown model wins over bad input", func(r *pb.ModelInferRequest) {
			r.ModelName = "nope"
			r.RawInputContents = nil
		}, codes.InvalidArgument, "Request for unknown model: 'nope' is not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := good()
			tc.mutate(r)
			_, err := c.ModelInfer(callCtx(t), r)
			wantStatus(t, err, tc.code, tc.text)
		})
	}
}
