package main

// End-to-end tests of the gRPC front end: the built binary, real models,
// a grpc-go client on loopback.

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

func TestGRPC(t *testing.T) {
	ipctest.RequirePython(t)
	repo := copyRepo(t, "add_sub", "identity_all", "identity_fp32", "repeat_decoupled")
	s := startServer(t, repo, "--model-control-mode", "explicit", "--load-model", "*", "--allow-client-shm")
	conn, c := grpcClient(t, s)

	t.Run("health", func(t *testing.T) {
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
	})

	t.Run("reflection", func(t *testing.T) {
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
	})

	t.Run("model metadata config ready", func(t *testing.T) {
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
	})

	t.Run("add_sub raw", func(t *testing.T) {
		r, err := c.ModelInfer(callCtx(t), &pb.ModelInferRequest{
			ModelName: "add_sub", Id: "req-1",
			Inputs: []*pb.ModelInferRequest_InferInputTensor{
				{Name: "INPUT0", Datatype: "FP32", Shape: []int64{4}},
				{Name: "INPUT1", Datatype: "FP32", Shape: []int64{4}},
			},
			Outputs:          []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT1"}, {Name: "OUTPUT0"}},
			RawInputContents: [][]byte{le32f(1, 2, 3, 4), le32f(10, 20, 30, 40)},
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
			!bytes.Equal(raw0, le32f(11, 22, 33, 44)) || !bytes.Equal(raw1, le32f(-9, -18, -27, -36)) {
			t.Fatalf("outputs %v: %x %x", r.Outputs, raw0, raw1)
		}
	})

	// identity_all echoes every input it gets as the output of the same
	// suffix: one request with all 14 dtypes as raw contents.
	t.Run("every dtype raw", func(t *testing.T) {
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
			"INT32":  {"INT32", []int64{2}, le32i(-1, 7)},
			"INT64":  {"INT64", []int64{1}, []byte{0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
			"FP16":   {"FP16", []int64{2}, []byte{0x00, 0x3c, 0x00, 0xc0}},
			"FP32":   {"FP32", []int64{3}, le32f(1.5, -2, 0)},
			"FP64":   {"FP64", []int64{1}, binary.LittleEndian.AppendUint64(nil, math.Float64bits(math.Pi))},
			"STRING": {"BYTES", []int64{3}, bytesElems("a", "", "héllo\x00world")},
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
	})

	t.Run("every dtype typed contents", func(t *testing.T) {
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
			{"INT32", "INT32", &pb.InferTensorContents{IntContents: []int32{-1, 7}}, le32i(-1, 7)},
			{"INT64", "INT64", &pb.InferTensorContents{Int64Contents: []int64{-2}}, []byte{0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
			{"FP32", "FP32", &pb.InferTensorContents{Fp32Contents: []float32{1.5, -2}}, le32f(1.5, -2)},
			{"FP64", "FP64", &pb.InferTensorContents{Fp64Contents: []float64{math.Pi}}, binary.LittleEndian.AppendUint64(nil, math.Float64bits(math.Pi))},
			{"STRING", "BYTES", &pb.InferTensorContents{BytesContents: [][]byte{[]byte("x"), {}, []byte("yz")}}, bytesElems("x", "", "yz")},
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
	})

	t.Run("bad requests", func(t *testing.T) {
		fp := func(name string, shape ...int64) *pb.ModelInferRequest_InferInputTensor {
			return &pb.ModelInferRequest_InferInputTensor{Name: name, Datatype: "FP32", Shape: shape}
		}
		good := func() *pb.ModelInferRequest {
			return &pb.ModelInferRequest{ModelName: "add_sub",
				Inputs:           []*pb.ModelInferRequest_InferInputTensor{fp("INPUT0", 4), fp("INPUT1", 4)},
				RawInputContents: [][]byte{le32f(1, 2, 3, 4), le32f(1, 2, 3, 4)}}
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
			{"wrong byte size", func(r *pb.ModelInferRequest) { r.RawInputContents[0] = le32f(1, 2, 3) }, codes.InvalidArgument, "input byte size mismatch for input 'INPUT0' for model 'add_sub'. Expected 16, got 12"},
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
				r.RawInputContents = [][]byte{le32i(1), le32i(0), le32i(0)}
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
	})

	t.Run("stream decoupled", func(t *testing.T) {
		repeat := func(id string, vals []int32, params map[string]*pb.InferParameter) *pb.ModelInferRequest {
			return &pb.ModelInferRequest{ModelName: "repeat_decoupled", Id: id, Parameters: params,
				Inputs: []*pb.ModelInferRequest_InferInputTensor{
					{Name: "IN", Datatype: "INT32", Shape: []int64{int64(len(vals))}},
					{Name: "DELAY", Datatype: "UINT32", Shape: []int64{int64(len(vals))}},
					{Name: "WAIT", Datatype: "UINT32", Shape: []int64{1}},
				},
				RawInputContents: [][]byte{le32i(vals...), make([]byte, 4*len(vals)), le32i(0)}}
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
		bad.RawInputContents[1] = le32i(0)
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
		for {
			m, err := st.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			r := m.InferResponse
			if m.ErrorMessage != "" {
				errs[r.GetId()] = m.ErrorMessage
				continue
			}
			final := r.Parameters["triton_final_response"].GetBoolParam()
			if final {
				finals[r.Id]++
			}
			if len(r.Outputs) == 0 {
				if !final || r.ModelName != "repeat_decoupled" {
					t.Errorf("empty response that is not the final one: %v", r)
				}
				continue
			}
			_, out := outputByName(t, r, "OUT")
			got[r.Id] = append(got[r.Id], int32(binary.LittleEndian.Uint32(out)))
		}
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
	})

	t.Run("stream non-decoupled", func(t *testing.T) {
		st, err := c.ModelStreamInfer(callCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			if err := st.Send(&pb.ModelInferRequest{ModelName: "identity_fp32", Id: string(rune('x' + i)),
				Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{1}}},
				RawInputContents: [][]byte{le32f(float32(i))}}); err != nil {
				t.Fatal(err)
			}
		}
		_ = st.CloseSend()
		n := 0
		for {
			m, err := st.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.ErrorMessage != "" || !m.InferResponse.Parameters["triton_final_response"].GetBoolParam() {
				t.Fatalf("response %v", m)
			}
			n++
		}
		if n != 3 {
			t.Fatalf("%d responses, want 3", n)
		}
	})

	t.Run("stream triton_grpc_error", func(t *testing.T) {
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
	})

	t.Run("statistics", func(t *testing.T) {
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
	})

	t.Run("repository", func(t *testing.T) {
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
	})

	t.Run("system shared memory", func(t *testing.T) {
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
	})

	t.Run("log and trace settings", func(t *testing.T) {
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
	})

	t.Run("large message", func(t *testing.T) {
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
	})
}
