package supervisor

import (
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/backendapi/modelconfig"
	"github.com/stubvisor/stubvisor/supervisor/clientshm"
)

// gpuOptions tells Normalize the devices the CUDA driver reports, when the
// config has a group that needs them (KIND_GPU without gpus, or KIND_AUTO),
// so that such a group runs on every device as in Triton. The driver is
// loaded only then; without one the groups stay as they are and Validate
// says that no GPU is available.
func gpuOptions(cfg *inferencepb.ModelConfig) []modelconfig.Option {
	need := false
	for _, g := range cfg.GetInstanceGroup() {
		switch g.GetKind() {
		case inferencepb.ModelInstanceGroup_KIND_AUTO:
			need = true
		case inferencepb.ModelInstanceGroup_KIND_GPU:
			need = need || len(g.GetGpus()) == 0
		}
	}
	if !need {
		return nil
	}
	d, err := clientshm.CUDADriver()
	if err != nil || d.DeviceCount() == 0 {
		return nil
	}
	ids := make([]int, d.DeviceCount())
	for i := range ids {
		ids[i] = i
	}
	return []modelconfig.Option{modelconfig.WithGPUs(ids...)}
}
