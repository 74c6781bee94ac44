package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/ipc/ipctest"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// grpcStreamDecoupled is the case "stream decoupled" of TestGRPC.
func grpcStreamDecoupled(t *testing.T, e grpcSuite) {
	c := e.c
	repeat := func(id string, vals []int32, params map[string]*pb.InferParameter) *pb.ModelInferRequest {
		return &pb.ModelInferRequest{ModelName: "repeat_decoupled", Id: id, Parameters: params,
			Inputs: []*pb.ModelInferRequest_InferInputTensor{
				{Name: "IN", Datatype: "INT32", Shape: []int64{int64(len(vals))}},
				{Name: "DELAY", Datatype: "UINT32", Shape: []int64{int64(len(vals))}},
				{Name: "WAIT", Datatype: "UINT32", Shape: []int64{1}},
			},
			RawInputContents: [][]byte{ipctest.INT32(vals...), make([]byte, 4*len(vals)), ipctest.INT32(0)}}
	}
	st, err := c.ModelStreamInfer(callCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	// Two requests in flight on one stream; the second asks for the
	// empty final response.
	if err := st.Send(repeat("a", []int32{10, 11, 12, 13, 14}, nil)); err != nil {
		t.Fatal(err)
	}
	if err := st.Send(repeat("b", []int32{7, 8}, map[string]*pb.InferParameter{"triton_enable_empty_final_response": boolParam(true)})); err != nil {
		t.Fatal(err)
	}
	// A model error (IN and DELAY shapes differ) comes back in-band.
	bad := repeat("c", []int32{1, 2}, nil)
	bad.Inputs[1].Shape = []int64{1}
	bad.RawInputContents[1] = ipctest.INT32(0)
	if err := st.Send(bad); err != nil {
		t.Fatal(err)
	}
	// So does a request error (unknown model).
	if err := st.Send(&pb.ModelInferRequest{ModelName: "nope", Id: "d"}); err != nil {
		t.Fatal(err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	got := map[string][]int32{}
	finals := map[string]int{}
	errs := map[string]string{}
	recvEach(t, st, func(m *pb.ModelStreamInferResponse) bool {
		r := m.InferResponse
		if m.ErrorMessage != "" {
			errs[r.GetId()] = m.ErrorMessage
			return true
		}
		final := r.Parameters["triton_final_response"].GetBoolParam()
		if final {
			finals[r.Id]++
		}
		if len(r.Outputs) == 0 {
			if !final || r.ModelName != "repeat_decoupled" {
				t.Errorf("empty response that is not the final one: %v", r)
			}
			return true
		}
		_, out := outputByName(t, r, "OUT")
		got[r.Id] = append(got[r.Id], int32(binary.LittleEndian.Uint32(out)))
		return true
	})
	if !slices.Equal(got["a"], []int32{10, 11, 12, 13, 14}) || !slices.Equal(got["b"], []int32{7, 8}) {
		t.Errorf("streamed values %v", got)
	}
	if finals["a"] != 0 || finals["b"] != 1 {
		t.Errorf("final responses %v, want only b's empty one", finals)
	}
	if !strings.Contains(errs["c"], "expected IN and DELAY shape to match, got [2] and [1]") ||
		!strings.Contains(errs["d"], "Request for unknown model: 'nope' is not found") {
		t.Errorf("in-band errors %q", errs)
	}
}

// grpcStreamNonDecoupled is the case "stream non-decoupled" of TestGRPC.
func grpcStreamNonDecoupled(t *testing.T, e grpcSuite) {
	c := e.c
	st, err := c.ModelStreamInfer(callCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := st.Send(&pb.ModelInferRequest{ModelName: "identity_fp32", Id: string(rune('x' + i)),
			Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{1}}},
			RawInputContents: [][]byte{ipctest.FP32(float32(i))}}); err != nil {
			t.Fatal(err)
		}
	}
	_ = st.CloseSend()
	n := 0
	recvEach(t, st, func(m *pb.ModelStreamInferResponse) bool {
		if m.ErrorMessage != "" || !m.InferResponse.Parameters["triton_final_response"].GetBoolParam() {
			t.Fatalf("response %v", m)
		}
		n++
		return true
	})
	if n != 3 {
		t.Fatalf("%d responses, want 3", n)
	}
}

// grpcStreamTritonGrpcError is the case "stream triton_grpc_error" of TestGRPC.
func grpcStreamTritonGrpcError(t *testing.T, e grpcSuite) {
	c := e.c
	ctx := metadata.AppendToOutgoingContext(callCtx(t), "triton_grpc_error", "true")
	st, err := c.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&pb.ModelInferRequest{ModelName: "nope"}); err != nil {
		t.Fatal(err)
	}
	_, err = st.Recv()
	wantStatus(t, err, codes.InvalidArgument, "Request for unknown model: 'nope' is not found")
}

// grpcStatistics is the case "statistics" of TestGRPC.
func grpcStatistics(t *testing.T, e grpcSuite) {
	c := e.c
	r, err := c.ModelStatistics(callCtx(t), &pb.ModelStatisticsRequest{Name: "add_sub"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.ModelStats) != 1 || r.ModelStats[0].Name != "add_sub" || r.ModelStats[0].Version != "1" ||
		r.ModelStats[0].InferenceCount < 1 || r.ModelStats[0].InferenceStats.Success.Count < 1 {
		t.Fatalf("stats %v", r)
	}
	all, err := c.ModelStatistics(callCtx(t), &pb.ModelStatisticsRequest{})
	if err != nil || len(all.ModelStats) != 4 {
		t.Fatalf("all stats: %d %v", len(all.GetModelStats()), err)
	}
	_, err = c.ModelStatistics(callCtx(t), &pb.ModelStatisticsRequest{Name: "nope"})
	if status.Code(err) == codes.OK {
		t.Fatal("statistics of an unknown model succeeded")
	}
}

// grpcRepository is the case "repository" of TestGRPC.
func grpcRepository(t *testing.T, e grpcSuite) {
	c := e.c
	ctx := callCtx(t)
	idx, err := c.RepositoryIndex(ctx, &pb.RepositoryIndexRequest{})
	if err != nil || len(idx.Models) != 4 {
		t.Fatalf("index %v %v", idx, err)
	}
	if _, err := c.RepositoryModelUnload(ctx, &pb.RepositoryModelUnloadRequest{ModelName: "identity_fp32",
		Parameters: map[string]*pb.ModelRepositoryParameter{"unload_dependents": {ParameterChoice: &pb.ModelRepositoryParameter_BoolParam{BoolParam: false}}}}); err != nil {
		t.Fatal(err)
	}
	if r, err := c.ModelReady(ctx, &pb.ModelReadyRequest{Name: "identity_fp32"}); err != nil || r.Ready {
		t.Fatalf("ready after unload: %v %v", r, err)
	}
	ready, err := c.RepositoryIndex(ctx, &pb.RepositoryIndexRequest{Ready: true})
	if err != nil || len(ready.Models) != 3 {
		t.Fatalf("ready index %v %v", ready, err)
	}
	_, err = c.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: "identity_fp32",
		Parameters: map[string]*pb.ModelRepositoryParameter{"config": {ParameterChoice: &pb.ModelRepositoryParameter_BytesParam{BytesParam: []byte("{}")}}}})
	wantStatus(t, err, codes.InvalidArgument, "invalid value type for load parameter 'config', expected string_param.")
	_, err = c.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{RepositoryName: "r", ModelName: "identity_fp32"})
	wantStatus(t, err, codes.Unimplemented, "'repository_name' specification is not supported")
	if _, err := c.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: "identity_fp32"}); err != nil {
		t.Fatal(err)
	}
	if r, err := c.ModelReady(ctx, &pb.ModelReadyRequest{Name: "identity_fp32"}); err != nil || !r.Ready {
		t.Fatalf("ready after load: %v %v", r, err)
	}
}

// grpcSystemSharedMemory is the case "system shared memory" of TestGRPC.
func grpcSystemSharedMemory(t *testing.T, e grpcSuite) {
	c := e.c
	ctx := callCtx(t)
	key := "e2e-client-grpc"
	path := filepath.Join("/dev/shm", key)
	if err := os.WriteFile(path, make([]byte, 64), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(path) })
	_, err := c.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: "r1", Key: "/" + key, ByteSize: 64})
	if st, _ := status.FromError(err); st.Code() == codes.Unimplemented && strings.Contains(st.Message(), "not supported by this server yet") {
		// The backend's UNSUPPORTED reached the client as
		// UNIMPLEMENTED with its text; the rest needs the feature.
		t.Skipf("the backend has no system shared memory yet: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: "r1", Key: "/" + key, ByteSize: 64})
	wantStatus(t, err, codes.AlreadyExists, "shared memory region 'r1' already in manager")
	_, err = c.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: "r2", Key: "/e2e-client-missing", ByteSize: 64})
	wantStatus(t, err, codes.Internal, "Unable to open shared memory region: '/e2e-client-missing'")
	st, err := c.SystemSharedMemoryStatus(ctx, &pb.SystemSharedMemoryStatusRequest{})
	if err != nil || st.Regions["r1"].GetByteSize() != 64 || st.Regions["r1"].GetKey() != "/"+key {
		t.Fatalf("status %v %v", st, err)
	}
	_, err = c.CudaSharedMemoryStatus(ctx, &pb.CudaSharedMemoryStatusRequest{Name: "r1"})
	wantStatus(t, err, codes.InvalidArgument, "The region named 'r1' is registered as system shared memory, not CUDA shared memory")
	_, err = c.CudaSharedMemoryStatus(ctx, &pb.CudaSharedMemoryStatusRequest{Name: "nope"})
	wantStatus(t, err, codes.NotFound, "Unable to find cuda shared memory region: 'nope'")
	if _, err := c.SystemSharedMemoryUnregister(ctx, &pb.SystemSharedMemoryUnregisterRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err = c.SystemSharedMemoryStatus(ctx, &pb.SystemSharedMemoryStatusRequest{Name: "r1"})
	wantStatus(t, err, codes.NotFound, "Unable to find system shared memory region: 'r1'")
	cs, err := c.CudaSharedMemoryStatus(ctx, &pb.CudaSharedMemoryStatusRequest{})
	if err != nil || len(cs.Regions) != 0 {
		t.Fatalf("cuda status %v %v", cs, err)
	}
	_, err = c.CudaSharedMemoryRegister(ctx, &pb.CudaSharedMemoryRegisterRequest{Name: "g", RawHandle: make([]byte, 64), ByteSize: 64})
	if status.Code(err) == codes.OK {
		t.Fatal("CUDA shared memory registered on a server without GPUs")
	}
	if _, err := c.CudaSharedMemoryUnregister(ctx, &pb.CudaSharedMemoryUnregisterRequest{}); err != nil {
		t.Fatal(err)
	}
}

// grpcLogAndTraceSettings is the case "log and trace settings" of TestGRPC.
func grpcLogAndTraceSettings(t *testing.T, e grpcSuite) {
	c := e.c
	ctx := callCtx(t)
	r, err := c.LogSettings(ctx, &pb.LogSettingsRequest{})
	if err != nil || len(r.Settings) != 6 || !r.Settings["log_info"].GetBoolParam() || r.Settings["log_format"].GetStringParam() != "default" {
		t.Fatalf("log settings %v %v", r, err)
	}
	r, err = c.LogSettings(ctx, &pb.LogSettingsRequest{Settings: map[string]*pb.LogSettingsRequest_SettingValue{
		"log_verbose_level": {ParameterChoice: &pb.LogSettingsRequest_SettingValue_Uint32Param{Uint32Param: 1}},
	}})
	if err != nil || r.Settings["log_verbose_level"].GetUint32Param() != 1 {
		t.Fatalf("set verbose: %v %v", r, err)
	}
	_, err = c.LogSettings(ctx, &pb.LogSettingsRequest{Settings: map[string]*pb.LogSettingsRequest_SettingValue{
		"log_format": {ParameterChoice: &pb.LogSettingsRequest_SettingValue_StringParam{StringParam: "xml"}},
	}})
	wantStatus(t, err, codes.Unavailable, "invalid argument for --log_format, got: xml")
	_, err = c.LogSettings(ctx, &pb.LogSettingsRequest{Settings: map[string]*pb.LogSettingsRequest_SettingValue{
		"log_file": {ParameterChoice: &pb.LogSettingsRequest_SettingValue_StringParam{StringParam: "/tmp/x"}},
	}})
	wantStatus(t, err, codes.Unimplemented, "log file location can not be updated through network protocol")
	r, err = c.LogSettings(ctx, &pb.LogSettingsRequest{Settings: map[string]*pb.LogSettingsRequest_SettingValue{
		"log_verbose_level": {ParameterChoice: &pb.LogSettingsRequest_SettingValue_Uint32Param{Uint32Param: 0}},
	}})
	if err != nil || r.Settings["log_verbose_level"].GetUint32Param() != 0 {
		t.Fatalf("reset verbose: %v %v", r, err)
	}
	tr, err := c.TraceSetting(ctx, &pb.TraceSettingRequest{})
	if err != nil || strings.Join(tr.Settings["trace_level"].GetValue(), ",") != "OFF" || tr.Settings["trace_rate"].GetValue()[0] != "1000" {
		t.Fatalf("trace settings: %v %v", tr, err)
	}
	_, err = c.TraceSetting(ctx, &pb.TraceSettingRequest{Settings: map[string]*pb.TraceSettingRequest_SettingValue{"trace_file": {Value: []string{"/tmp/x"}}}})
	wantStatus(t, err, codes.Unimplemented, "trace file location can not be updated through network protocol")
}

// grpcLargeMessage is the case "large message" of TestGRPC.
func grpcLargeMessage(t *testing.T, e grpcSuite) {
	c := e.c
	// 16 MiB, four times gRPC's default limit, both ways.
	data := make([]byte, 16<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	data = data[:len(data)/4*4]
	r, err := c.ModelInfer(callCtx(t), &pb.ModelInferRequest{ModelName: "identity_fp32",
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{int64(len(data) / 4)}}},
		RawInputContents: [][]byte{data}})
	if err != nil {
		t.Fatal(err)
	}
	if _, raw := outputByName(t, r, "OUTPUT0"); !bytes.Equal(raw, data) {
		t.Fatal("16 MiB identity came back different")
	}
}
