package server

import (
	"net/http"
	"sort"
	"strconv"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/modelconfig"
)

// tensorMetadataJSON and modelMetadataJSON are the KServe v2 model metadata
// reply, fields in the order Triton writes them.
type tensorMetadataJSON struct {
	Name     string  `json:"name"`
	DataType string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

type modelMetadataJSON struct {
	Name     string               `json:"name"`
	Versions []string             `json:"versions"`
	Platform string               `json:"platform"`
	Inputs   []tensorMetadataJSON `json:"inputs"`
	Outputs  []tensorMetadataJSON `json:"outputs"`
}

func tensorsJSON(ts []backendapi.TensorMetadata) []tensorMetadataJSON {
	out := make([]tensorMetadataJSON, len(ts))
	for i, t := range ts {
		shape := t.Shape
		if shape == nil {
			shape = []int64{}
		}
		out[i] = tensorMetadataJSON{Name: t.Name, DataType: t.DataType.String(), Shape: shape}
	}
	return out
}

// newModelMetadataJSON is the JSON form of model metadata (GET /v2/models/{m}).
func newModelMetadataJSON(md *backendapi.ModelMetadata) any {
	versions := md.Versions
	if versions == nil {
		versions = []string{}
	}
	return modelMetadataJSON{
		Name:     md.Name,
		Versions: versions,
		Platform: md.Platform,
		Inputs:   tensorsJSON(md.Inputs),
		Outputs:  tensorsJSON(md.Outputs),
	}
}

// admitVersion admits a request to a model endpoint that takes method and
// parses its version ("" is 0: the policy's choice); on failure it has
// answered already.
func admitVersion(w http.ResponseWriter, r *http.Request, method, version string) (int64, bool) {
	if !allow(w, r, method) {
		return 0, false
	}
	v, err := parseModelVersion(version)
	if err != nil {
		writeError(w, err)
		return 0, false
	}
	return v, true
}

func (s *Server) handleModelMetadata(w http.ResponseWriter, r *http.Request, model, version string) {
	v, ok := admitVersion(w, r, http.MethodGet, version)
	if !ok {
		return
	}
	md, err := s.backend.ModelMetadata(r.Context(), model, v)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, newModelMetadataJSON(md))
}

// handleModelReady answers 200 with an empty body for a ready model, and
// Triton's 400 "Model version not ready" otherwise.
func (s *Server) handleModelReady(w http.ResponseWriter, r *http.Request, model, version string) {
	v, ok := admitVersion(w, r, http.MethodGet, version)
	if !ok {
		return
	}
	if err := s.backend.ModelReady(r.Context(), model, v); err != nil {
		writeErrorStatus(w, http.StatusBadRequest, msgModelNotReady)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) handleModelConfig(w http.ResponseWriter, r *http.Request, model, version string) {
	v, ok := admitVersion(w, r, http.MethodGet, version)
	if !ok {
		return
	}
	cfg, err := s.backend.ModelConfig(r.Context(), model, v)
	if err != nil {
		writeError(w, err)
		return
	}
	b, err := modelconfig.ToJSON(cfg)
	if err != nil {
		writeError(w, backendapi.Errorf(backendapi.Internal, "failed to encode the model configuration of '%s': %v", model, err))
		return
	}
	writeRawJSON(w, b)
}

func (s *Server) handleStats(w http.ResponseWriter, r *http.Request, model, version string) {
	v, ok := admitVersion(w, r, http.MethodGet, version)
	if !ok {
		return
	}
	stats, err := s.backend.ModelStatistics(r.Context(), model, v)
	if err != nil {
		writeError(w, err)
		return
	}
	writeRawJSON(w, appendStatisticsJSON(nil, stats))
}

// appendStatisticsJSON appends the statistics extension's reply,
// {"model_stats":[...]}, with durations as {"count":N,"ns":T}.
func appendStatisticsJSON(dst []byte, stats []backendapi.ModelStatistics) []byte {
	dst = append(dst, `{"model_stats":[`...)
	for i := range stats {
		st := &stats[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"name":`...)
		dst = appendJSONString(dst, st.Name)
		dst = append(dst, `,"version":`...)
		dst = appendJSONString(dst, st.Version)
		dst = append(dst, `,"last_inference":`...)
		var last int64
		if !st.LastInference.IsZero() {
			last = st.LastInference.UnixMilli()
		}
		dst = strconv.AppendInt(dst, last, 10)
		dst = append(dst, `,"inference_count":`...)
		dst = strconv.AppendUint(dst, st.InferenceCount, 10)
		dst = append(dst, `,"execution_count":`...)
		dst = strconv.AppendUint(dst, st.ExecutionCount, 10)
		in := &st.Inference
		dst = append(dst, `,"inference_stats":{`...)
		for j, d := range [...]struct {
			name string
			d    backendapi.Duration
		}{
			{"success", in.Success}, {"fail", in.Fail}, {"queue", in.Queue},
			{"compute_input", in.ComputeInput}, {"compute_infer", in.ComputeInfer},
			{"compute_output", in.ComputeOutput}, {"cache_hit", in.CacheHit}, {"cache_miss", in.CacheMiss},
		} {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = appendDurationStat(dst, d.name, d.d)
		}
		dst = append(dst, `},"response_stats":{},"batch_stats":[`...)
		batches := append([]backendapi.BatchStats(nil), st.Batches...)
		sort.Slice(batches, func(a, b int) bool { return batches[a].BatchSize < batches[b].BatchSize })
		for j, b := range batches {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"batch_size":`...)
			dst = strconv.AppendUint(dst, b.BatchSize, 10)
			dst = append(dst, ',')
			dst = appendDurationStat(dst, "compute_input", b.ComputeInput)
			dst = append(dst, ',')
			dst = appendDurationStat(dst, "compute_infer", b.ComputeInfer)
			dst = append(dst, ',')
			dst = appendDurationStat(dst, "compute_output", b.ComputeOutput)
			dst = append(dst, '}')
		}
		dst = append(dst, `],"memory_usage":[]}`...)
	}
	return append(dst, "]}"...)
}

func appendDurationStat(dst []byte, name string, d backendapi.Duration) []byte {
	dst = append(dst, '"')
	dst = append(dst, name...)
	dst = append(dst, `":{"count":`...)
	dst = strconv.AppendUint(dst, d.Count, 10)
	dst = append(dst, `,"ns":`...)
	dst = strconv.AppendInt(dst, max(int64(d.Total), 0), 10)
	return append(dst, '}')
}
