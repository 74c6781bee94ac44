package main

// An ensemble is a model like any other: loaded through the model loading
// API with a config override, called through the generate endpoints, and
// with its inputs and outputs in client shared memory over gRPC (HTTP:
// TestEnsembleSharedMemory; BLS and nested: TestBLSCallsAnEnsemble).

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// ensOverride is an ens_pipeline config for the load API's "config"
// parameter: INPUT0 through the given steps (each FP32 INPUT0 -> OUTPUT0).
func ensOverride(steps ...string) string {
	var st []map[string]any
	from := "INPUT0"
	for i, m := range steps {
		to := fmt.Sprintf("t%d", i)
		if i == len(steps)-1 {
			to = "OUTPUT0"
		}
		st = append(st, map[string]any{"model_name": m, "model_version": -1,
			"input_map": map[string]string{"INPUT0": from}, "output_map": map[string]string{"OUTPUT0": to}})
		from = to
	}
	b, _ := json.Marshal(map[string]any{"name": "ens_pipeline", "platform": "ensemble", "max_batch_size": 0,
		"input":               []map[string]any{{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": []int{-1}}},
		"output":              []map[string]any{{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": []int{-1}}},
		"ensemble_scheduling": map[string]any{"step": st}})
	return string(b)
}

func TestEnsembleLikeAnyModel(t *testing.T) {
	s := startEnsembleServer(t, "--load-model", "ens_stream", "--allow-client-shm=true")
	_, c := grpcClient(t, s)
	load := func(t *testing.T, config string) {
		t.Helper()
		code, body := s.postJSON("/v2/repository/models/ens_pipeline/load", map[string]any{"parameters": map[string]any{"config": config}})
		if code != http.StatusOK {
			t.Fatalf("load with a config override: %d %s", code, body)
		}
	}

	t.Run("load API with a config override", func(t *testing.T) {
		// (x + 1) * 2 instead of the repository's x * 2 + 1; the steps
		// are loaded with it.
		load(t, ensOverride("ens_offset", "ens_scale"))
		if out := ensOutputs(t, s, "ens_pipeline", ensFP32(nil, nil, 1, 2)); out["OUTPUT0"] != "[4,6]" {
			t.Fatalf("OUTPUT0 = %s, want [4,6]", out["OUTPUT0"])
		}
		var cfg struct {
			Ensemble struct {
				Step []struct {
					ModelName string `json:"model_name"`
				} `json:"step"`
			} `json:"ensemble_scheduling"`
		}
		s.getJSON("/v2/models/ens_pipeline/config", &cfg)
		if len(cfg.Ensemble.Step) != 2 || cfg.Ensemble.Step[0].ModelName != "ens_offset" {
			t.Fatalf("config after the override: %+v", cfg)
		}
		// Another override replaces it.
		load(t, ensOverride("ens_scale"))
		if out := ensOutputs(t, s, "ens_pipeline", ensFP32(nil, nil, 1, 2)); out["OUTPUT0"] != "[2,4]" {
			t.Fatalf("after a second override OUTPUT0 = %s, want [2,4]", out["OUTPUT0"])
		}
		// Unloaded, it answers like any unloaded model.
		if code, body := s.postJSON("/v2/repository/models/ens_pipeline/unload", map[string]any{}); code != http.StatusOK {
			t.Fatalf("unload: %d %s", code, body)
		}
		if code, _ := s.httpInferJSON("ens_pipeline", ensFP32(nil, nil, 1)); code == http.StatusOK {
			t.Fatal("an unloaded ensemble answered")
		}
		load(t, ensOverride("ens_offset", "ens_scale"))
	})

	t.Run("generate", func(t *testing.T) {
		code, body := s.postJSON("/v2/models/ens_pipeline/generate", map[string]any{"INPUT0": []float32{1, 2}})
		var got map[string]any
		if code != http.StatusOK || json.Unmarshal(body, &got) != nil {
			t.Fatalf("generate: %d %s", code, body)
		}
		if got["model_name"] != "ens_pipeline" || fmt.Sprint(got["OUTPUT0"]) != "[4 6]" {
			t.Fatalf("generate answered %s, want ens_pipeline's OUTPUT0 [4,6]", body)
		}
	})

	t.Run("generate_stream of a decoupled ensemble", func(t *testing.T) {
		st := curlSSE(t, s, "/v2/models/ens_stream/generate_stream", `{"IN":[1,2,3],"DELAY":[0,0,0],"WAIT":[0]}`)
		var outs []string
		for _, ev := range st.all() {
			if ev["error"] != nil {
				t.Fatalf("event %v", ev)
			}
			if ev["OUT"] != nil {
				outs = append(outs, fmt.Sprint(ev["OUT"], ev["IDX"]))
			}
		}
		// One-element outputs are plain values in the generate extension.
		// Each response of the first step runs the second on its own, so
		// they may come in any order, as in Triton.
		slices.Sort(outs)
		if strings.Join(outs, ", ") != "10 0, 20 1, 30 2" {
			t.Fatalf("streamed OUT IDX %v, want 10 0, 20 1, 30 2", outs)
		}
	})

	t.Run("gRPC with inputs and outputs in client shared memory", func(t *testing.T) {
		region := newClientRegion(t, "ens-grpc", 4096)
		if _, err := c.SystemSharedMemoryRegister(callCtx(t), &pb.SystemSharedMemoryRegisterRequest{Name: "ens_grpc", Key: region.key, ByteSize: 4096}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = c.SystemSharedMemoryUnregister(callCtx(t), &pb.SystemSharedMemoryUnregisterRequest{Name: "ens_grpc"})
		})
		shm := func(offset, size int64) map[string]*pb.InferParameter {
			return map[string]*pb.InferParameter{
				"shared_memory_region":    {ParameterChoice: &pb.InferParameter_StringParam{StringParam: "ens_grpc"}},
				"shared_memory_offset":    int64Param(offset),
				"shared_memory_byte_size": int64Param(size),
			}
		}
		copy(region.mem[0:], ipctest.FP32(1, 2, 3))
		resp, err := c.ModelInfer(callCtx(t), &pb.ModelInferRequest{ModelName: "ens_pipeline",
			Inputs:  []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{3}, Parameters: shm(0, 12)}},
			Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT0", Parameters: shm(1024, 12)}}})
		if err != nil {
			t.Fatal(err)
		}
		// As in Triton, the output has an entry in raw_output_contents,
		// empty: its bytes are in the region.
		if len(resp.RawOutputContents) != 1 || len(resp.RawOutputContents[0]) != 0 {
			t.Errorf("raw_output_contents %v, want one empty entry", resp.RawOutputContents)
		}
		if got := fmt.Sprint(ipctest.FP32s(region.mem[1024:1036])); got != "[4 6 8]" {
			t.Fatalf("OUTPUT0 in the region: %s, want [4 6 8]", got)
		}
		ensPoolsIdle(t, s, "ens_offset", "ens_scale")
	})
}
