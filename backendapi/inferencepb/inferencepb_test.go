package inferencepb_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

// TestWireContract pins names and numbers that Triton clients depend on:
// changing any of them breaks tritonclient or configs written for Triton.
func TestWireContract(t *testing.T) {
	fields := []struct {
		message string
		field   string
		number  protoreflect.FieldNumber
	}{
		{"inference.ModelConfig", "name", 1},
		{"inference.ModelConfig", "platform", 2},
		{"inference.ModelConfig", "version_policy", 3},
		{"inference.ModelConfig", "max_batch_size", 4},
		{"inference.ModelConfig", "input", 5},
		{"inference.ModelConfig", "output", 6},
		{"inference.ModelConfig", "instance_group", 7},
		{"inference.ModelConfig", "default_model_filename", 8},
		{"inference.ModelConfig", "dynamic_batching", 11},
		{"inference.ModelConfig", "optimization", 12},
		{"inference.ModelConfig", "sequence_batching", 13},
		{"inference.ModelConfig", "parameters", 14},
		{"inference.ModelConfig", "ensemble_scheduling", 15},
		{"inference.ModelConfig", "model_warmup", 16},
		{"inference.ModelConfig", "backend", 17},
		{"inference.ModelConfig", "model_transaction_policy", 19},
		{"inference.ModelConfig", "batch_input", 20},
		{"inference.ModelConfig", "batch_output", 21},
		{"inference.ModelConfig", "response_cache", 24},
		{"inference.ModelConfig", "runtime", 25},
		{"inference.ModelInput", "reshape", 5},
		{"inference.ModelInput", "optional", 8},
		{"inference.ModelOutput", "label_filename", 4},
		{"inference.ModelOutput", "reshape", 5},
		{"inference.ModelInstanceGroup", "kind", 4},
		{"inference.ModelSequenceBatching.Control", "bool_false_true", 5},
		{"inference.ModelSequenceBatching", "state", 5},
		{"inference.InferParameter", "double_param", 4},
		{"inference.InferParameter", "uint64_param", 5},
		{"inference.ModelInferRequest", "raw_input_contents", 7},
		{"inference.ModelInferResponse", "raw_output_contents", 6},
		{"inference.ModelInferRequest.InferInputTensor", "contents", 5},
		{"inference.ModelStreamInferResponse", "infer_response", 2},
		{"inference.ModelStatistics", "response_stats", 9},
		{"inference.InferResponseStatistics", "cancel", 6},
		{"inference.RepositoryModelLoadRequest", "parameters", 3},
		{"inference.ModelRepositoryParameter", "bytes_param", 4},
		{"inference.CudaSharedMemoryRegisterRequest", "raw_handle", 2},
	}
	for _, f := range fields {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(f.message))
		if err != nil {
			t.Errorf("message %s: %v", f.message, err)
			continue
		}
		fd := d.(protoreflect.MessageDescriptor).Fields().ByName(protoreflect.Name(f.field))
		if fd == nil || fd.Number() != f.number {
			t.Errorf("%s.%s: got %v, want number %d", f.message, f.field, fd, f.number)
		}
	}

	svc := inferencepb.File_grpc_service_proto.Services().ByName("GRPCInferenceService")
	if svc == nil || svc.FullName() != "inference.GRPCInferenceService" {
		t.Fatalf("service = %v, want inference.GRPCInferenceService", svc)
	}
	methods := []string{
		"ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata", "ModelInfer",
		"ModelStreamInfer", "ModelConfig", "ModelStatistics", "RepositoryIndex", "RepositoryModelLoad",
		"RepositoryModelUnload", "SystemSharedMemoryStatus", "SystemSharedMemoryRegister",
		"SystemSharedMemoryUnregister", "CudaSharedMemoryStatus", "CudaSharedMemoryRegister",
		"CudaSharedMemoryUnregister", "TraceSetting", "LogSettings",
	}
	if svc.Methods().Len() != len(methods) {
		t.Errorf("service has %d methods, want %d", svc.Methods().Len(), len(methods))
	}
	for _, m := range methods {
		if svc.Methods().ByName(protoreflect.Name(m)) == nil {
			t.Errorf("method %s missing", m)
		}
	}
	if md := svc.Methods().ByName("ModelStreamInfer"); md == nil || !md.IsStreamingClient() || !md.IsStreamingServer() {
		t.Error("ModelStreamInfer must be bidirectional streaming")
	}

	// The enum values equal Triton's TRITONSERVER_DataType codes.
	if inferencepb.DataType_TYPE_STRING != 13 || inferencepb.DataType_TYPE_BF16 != 14 {
		t.Error("DataType numbering changed")
	}
}

// TestGeneratedUpToDate regenerates the package into a temporary directory
// and compares it with the committed files. It needs protoc, so it is
// skipped where protoc is not installed.
func TestGeneratedUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("regenerating code is slow; skipped in -short mode")
	}
	if _, err := exec.LookPath("protoc"); err != nil {
		t.Skip("protoc not installed")
	}
	dest := t.TempDir()
	cmd := exec.Command("sh", filepath.Join("..", "proto", "generate.sh"), dest)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("generate.sh: %v\n%s", err, out)
	}
	generated, err := filepath.Glob(filepath.Join(dest, "backendapi", "inferencepb", "*.pb.go"))
	if err != nil || len(generated) == 0 {
		t.Fatalf("generate.sh produced no files (%v)", err)
	}
	committed, err := filepath.Glob("*.pb.go")
	if err != nil {
		t.Fatal(err)
	}
	if len(committed) != len(generated) {
		t.Errorf("committed %v, generated %v", committed, generated)
	}
	for _, g := range generated {
		want, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Base(g))
		if err != nil {
			t.Errorf("%s is generated but not committed", filepath.Base(g))
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from generate.sh output; run `make proto`", filepath.Base(g))
		}
	}
}
