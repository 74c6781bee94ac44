package modelconfig

import (
	"slices"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

// DataType converts a config data type to the wire type. The numeric
// values are the same (both are Triton's TRITONSERVER_DataType codes), so
// TYPE_STRING becomes BYTES and an unknown value TypeInvalid.
func DataType(dt inferencepb.DataType) backendapi.DataType {
	d := backendapi.DataType(dt)
	if int32(dt) < 0 || int32(dt) > int32(backendapi.TypeBF16) || !d.Valid() {
		return backendapi.TypeInvalid
	}
	return d
}

// Metadata derives the KServe model metadata from a normalized config, as
// Triton does: platform is the config's platform or else its backend
// ("python"); versions are the ready versions, ascending, as strings; each
// tensor's shape is its dims with a leading -1 (the batch dimension) when
// max_batch_size > 0; data types are wire names ("FP32", "BYTES").
func Metadata(cfg *inferencepb.ModelConfig, readyVersions []int64) backendapi.ModelMetadata {
	md := backendapi.ModelMetadata{
		Name:     cfg.GetName(),
		Platform: cfg.GetPlatform(),
		Versions: []string{},
		Inputs:   []backendapi.TensorMetadata{},
		Outputs:  []backendapi.TensorMetadata{},
	}
	if md.Platform == "" {
		md.Platform = cfg.GetBackend()
	}
	versions := slices.Clone(readyVersions)
	slices.Sort(versions)
	for _, v := range slices.Compact(versions) {
		md.Versions = append(md.Versions, versionString(v))
	}
	batched := cfg.GetMaxBatchSize() > 0
	shape := func(dims []int64) []int64 {
		s := make([]int64, 0, len(dims)+1)
		if batched {
			s = append(s, wildcardDim)
		}
		return append(s, dims...)
	}
	for _, in := range cfg.GetInput() {
		md.Inputs = append(md.Inputs, backendapi.TensorMetadata{Name: in.GetName(), DataType: DataType(in.GetDataType()), Shape: shape(in.GetDims())})
	}
	for _, out := range cfg.GetOutput() {
		md.Outputs = append(md.Outputs, backendapi.TensorMetadata{Name: out.GetName(), DataType: DataType(out.GetDataType()), Shape: shape(out.GetDims())})
	}
	return md
}
