package supervisor

import (
	"context"
	"strconv"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc"
	"github.com/stubvisor/stubvisor/supervisor/stubproc"
)

// modelControl serves the model loading API of pb_utils (load_model,
// unload_model, is_model_ready) for a model's stub. It runs on a goroutine
// of its own: a load runs the loaded model's initialize, which may itself
// call back. The same rules as the repository endpoints apply (explicit
// model-control mode for load and unload).
func (s *Supervisor) modelControl(p *stubproc.Proc, m *ipc.ModelControlMsg) {
	ctx := context.Background()
	var value any
	var err error
	switch m.Op {
	case "load":
		opts := backendapi.LoadOptions{}
		if c, ok := m.Options["config"].(string); ok {
			opts.ConfigJSON = c
		}
		if files, ok := m.Options["files"].(map[string]any); ok && len(files) > 0 {
			opts.Files = make(map[string][]byte, len(files))
			for name, v := range files {
				switch v := v.(type) {
				case []byte:
					opts.Files[name] = v
				case string:
					opts.Files[name] = []byte(v)
				default:
					err = backendapi.Errorf(backendapi.InvalidArg, "failed to load '%s': the content of file '%s' must be bytes", m.Model, name)
				}
			}
		}
		if err == nil {
			err = s.LoadModel(ctx, m.Model, opts)
		}
	case "unload":
		dependents, _ := m.Options["unload_dependents"].(bool)
		err = s.UnloadModel(ctx, m.Model, dependents)
	case "is_ready":
		var version int64
		if v, _ := m.Options["version"].(string); v != "" {
			if version, err = strconv.ParseInt(v, 10, 64); err != nil {
				err = backendapi.Errorf(backendapi.InvalidArg, "failed to parse model version '%s' of model '%s'", v, m.Model)
			}
		}
		// As TRITONSERVER_ServerModelIsReady: a model or version that is
		// not loaded is not ready, which is no error.
		if err == nil {
			value = s.ModelReady(ctx, m.Model, version) == nil
		}
	default:
		err = backendapi.Errorf(backendapi.InvalidArg, "unknown model control operation '%s'", m.Op)
	}
	p.ControlReply(m.ID, value, err)
}
