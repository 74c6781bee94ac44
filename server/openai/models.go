package openai

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

// layout is how a request maps onto a model's tensors.
type layout int

const (
	layoutNone   layout = iota
	layoutVLLM          // text_input, stream, sampling_parameters (JSON)
	layoutTRTLLM        // text_input, stream?, max_tokens?, temperature?, ...
	layoutEmbed         // embedding_request (JSON) -> text_output (JSON list)
)

func (l layout) String() string {
	return [...]string{"none", "vllm", "trtllm", "embedding"}[l]
}

// configParam is the model config parameter that lists a model here
// ("true") or hides it ("false") whatever its layout.
const configParam = "openai"

// modelInfo is what the front end knows of one loaded model, derived from
// its config (and cached for as long as that config is loaded).
type modelInfo struct {
	name      string
	cfg       *inferencepb.ModelConfig
	layout    layout
	listed    bool
	inputs    map[string]backendapi.TensorMetadata
	outputs   map[string]bool
	created   int64
	loras     []string // adapter names from multi_lora.json
	dir       string   // the model's directory, "" if not found
	tmplOnce  sync.Once
	tmpl      *chatTemplate
	tmplError error
}

// catalog finds models and caches their modelInfo, keyed by the config
// pointer the backend returns (a reload gives a new one).
type catalog struct {
	backend backendapi.Backend
	repos   []string
	sep     string
	log     hclog.Logger

	mu    sync.Mutex
	infos map[string]*modelInfo
}

func newCatalog(b backendapi.Backend, repos []string, sep string, log hclog.Logger) *catalog {
	return &catalog{backend: b, repos: repos, sep: sep, log: log, infos: map[string]*modelInfo{}}
}

// splitLora splits a requested id into model and adapter names.
func (c *catalog) splitLora(id string) (model, lora string) {
	if c.sep == "" {
		return id, ""
	}
	model, lora, _ = strings.Cut(id, c.sep)
	return model, lora
}

// lookup returns the model a request names, which must be served here:
// loaded, with a layout of kind want (generation or embedding), and, when
// a LoRA adapter is named, one the model lists.
func (c *catalog) lookup(ctx context.Context, id string, embed bool) (*modelInfo, string, error) {
	name, lora := c.splitLora(id)
	info, err := c.info(ctx, name)
	if err != nil || info.layout == layoutNone {
		return nil, "", unknownModel(id)
	}
	if embed != (info.layout == layoutEmbed) {
		what := "a text generation"
		if embed {
			what = "an embedding"
		}
		return nil, "", badRequest("model", "Model '%s' is not %s model (its inputs have the %s layout)", id, what, info.layout)
	}
	if lora != "" && !containsString(info.loras, lora) {
		return nil, "", badRequest("model", "Unknown LoRA: %s; for model: %s", lora, name)
	}
	return info, lora, nil
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// info returns the cached modelInfo of a loaded model.
func (c *catalog) info(ctx context.Context, name string) (*modelInfo, error) {
	cfg, err := c.backend.ModelConfig(ctx, name, 0)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	info := c.infos[name]
	c.mu.Unlock()
	if info != nil && info.cfg == cfg {
		return info, nil
	}
	info, err = c.build(ctx, name, cfg)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.infos[name] = info
	c.mu.Unlock()
	return info, nil
}

// build derives a model's modelInfo from its config and metadata.
func (c *catalog) build(ctx context.Context, name string, cfg *inferencepb.ModelConfig) (*modelInfo, error) {
	md, err := c.backend.ModelMetadata(ctx, name, 0)
	if err != nil {
		return nil, err
	}
	info := &modelInfo{name: name, cfg: cfg, created: time.Now().Unix(),
		inputs: map[string]backendapi.TensorMetadata{}, outputs: map[string]bool{}}
	for _, in := range md.Inputs {
		info.inputs[in.Name] = in
	}
	for _, out := range md.Outputs {
		info.outputs[out.Name] = true
	}
	info.layout = detectLayout(info.inputs, info.outputs)
	decoupled := cfg.GetModelTransactionPolicy().GetDecoupled()
	info.listed = info.layout != layoutNone && (decoupled || info.layout == layoutEmbed)
	if p, ok := cfg.GetParameters()[configParam]; ok {
		switch strings.ToLower(p.GetStringValue()) {
		case "true", "1", "yes":
			info.listed = info.layout != layoutNone
		case "false", "0", "no":
			info.listed, info.layout = false, layoutNone
		}
	}
	info.dir = c.modelDir(name)
	if info.dir != "" {
		info.loras = readLoras(info.dir, md.Versions)
	}
	return info, nil
}

// detectLayout tells the layout from a model's tensor names, as Triton's
// frontend tells it from the backend: sampling_parameters is the vLLM
// backend's; text_input alone is the TRT-LLM layout that Python, ensemble
// and BLS models use; embedding_request is the vLLM embedding layout.
func detectLayout(inputs map[string]backendapi.TensorMetadata, outputs map[string]bool) layout {
	text := func(name string) bool {
		t, ok := inputs[name]
		return ok && t.DataType == backendapi.TypeBytes
	}
	switch {
	case !outputs["text_output"]:
		return layoutNone
	case text("embedding_request"):
		return layoutEmbed
	case text("text_input") && text("sampling_parameters"):
		return layoutVLLM
	case text("text_input"):
		return layoutTRTLLM
	}
	return layoutNone
}

// modelDir finds the model's directory in the repositories.
func (c *catalog) modelDir(name string) string {
	for _, repo := range c.repos {
		dir := filepath.Join(repo, name)
		if filepath.Base(dir) != name {
			continue // a name with a path in it
		}
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			return dir
		}
	}
	return ""
}

// readLoras reads the adapter names of the model's newest version's
// multi_lora.json ({"<adapter>": "<path>", ...}), as Triton's frontend
// does.
func readLoras(dir string, versions []string) []string {
	best := int64(-1)
	for _, v := range versions {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > best {
			best = n
		}
	}
	if best < 0 {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(dir, strconv.FormatInt(best, 10), "multi_lora.json"))
	if err != nil {
		return nil
	}
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// template returns the model's chat template: its tokenizer_config.json's,
// or the fallback when it has none.
func (info *modelInfo) template() (*chatTemplate, error) {
	info.tmplOnce.Do(func() {
		info.tmpl, info.tmplError = loadChatTemplate(info.dir)
	})
	return info.tmpl, info.tmplError
}

// modelObject is one entry of /v1/models.
type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// ownedBy is what Triton's frontend reports as a model's owner.
const ownedBy = "Triton Inference Server"

// listed returns the models /v1/models shows, by id.
func (c *catalog) listed(ctx context.Context) ([]modelObject, error) {
	index, err := c.backend.RepositoryIndex(ctx, true)
	if err != nil {
		return nil, err
	}
	var out []modelObject
	seen := map[string]bool{}
	for _, e := range index {
		if seen[e.Name] {
			continue
		}
		seen[e.Name] = true
		info, err := c.info(ctx, e.Name)
		if err != nil || !info.listed {
			continue
		}
		out = append(out, modelObject{ID: e.Name, Object: "model", Created: info.created, OwnedBy: ownedBy})
		if c.sep != "" {
			for _, l := range info.loras {
				out = append(out, modelObject{ID: e.Name + c.sep + l, Object: "model", Created: info.created, OwnedBy: ownedBy})
			}
		}
	}
	return out, nil
}

func (s *Server) handleListModels(w http.ResponseWriter, r *http.Request) {
	models, err := s.models.listed(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	if models == nil {
		models = []modelObject{}
	}
	writeJSON(w, http.StatusOK, struct {
		Object string        `json:"object"`
		Data   []modelObject `json:"data"`
	}{"list", models})
}

func (s *Server) handleGetModel(w http.ResponseWriter, r *http.Request, id string) {
	models, err := s.models.listed(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	for _, m := range models {
		if m.ID == id {
			writeJSON(w, http.StatusOK, m)
			return
		}
	}
	writeError(w, unknownModel(id))
}
