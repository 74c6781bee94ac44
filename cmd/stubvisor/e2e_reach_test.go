package main

// What a request can reach: the loading API writes only inside the
// model's own override directory, model names cannot name another place,
// --model-control-mode=none loads nothing whoever asks (HTTP, gRPC, BLS),
// and a stub holds only its own shared-memory region.

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// overrideDir is where the server writes a load request's files (as
// supervisor.writeOverride names it), so that a test can plant a symbolic
// link there first.
func overrideDir(cache, name string, files map[string][]byte) string {
	keys := make([]string, 0, len(files))
	for k := range files {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		h.Write([]byte(k))
		h.Write(files[k])
	}
	return filepath.Join(cache, "override", name+"-"+hex.EncodeToString(h.Sum(nil))[:16], name)
}

// identityConfig is identity_fp32's config as a load request's JSON.
const identityConfig = `{"name": "identity_fp32", "backend": "python", "max_batch_size": 0,
	"input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
	"output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}]}`

func TestLoadOverrideConfined(t *testing.T) {
	ipctest.RequirePython(t)
	cache := t.TempDir()
	outside := t.TempDir() // nothing may ever be written here
	repo := copyRepo(t, "identity_fp32", "model_control", "add_sub")
	s := startServer(t, repo, "--model-control-mode", "explicit", "--load-model", "model_control", "--cache-dir", cache)
	model := base64.StdEncoding.EncodeToString([]byte(doubleModel))
	load := func(name string, files map[string]string) (int, string) {
		params := map[string]any{"config": identityConfig}
		for k, v := range files {
			params[k] = v
		}
		code, body := s.postJSON("/v2/repository/models/"+strings.ReplaceAll(name, "/", "%2F")+"/load", map[string]any{"parameters": params})
		return code, errorText(body)
	}

	// A symbolic link planted where the override of this exact request
	// goes, pointing outside.
	planted := map[string][]byte{"file:1/model.py": []byte(doubleModel), "file:1/x/data.bin": []byte("data")}
	dir := overrideDir(cache, "identity_fp32", planted)
	if err := os.MkdirAll(filepath.Join(dir, "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "1", "x")); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name  string
		model string
		files map[string]string
		code  int
		text  string
	}{
		{"dot dot", "identity_fp32", map[string]string{"file:../model.py": model}, 400, "invalid file parameter 'file:../model.py'"},
		{"dot dot inside", "identity_fp32", map[string]string{"file:1/../../../../x.py": model}, 400, "invalid file parameter 'file:1/../../../../x.py'"},
		// As in Triton, the path is joined to the model's directory: a
		// leading slash does not make it absolute, the file lands inside
		// (and, without a version directory, the load fails).
		{"absolute", "identity_fp32", map[string]string{"file:" + outside + "/x.py": model}, 400, "at least one version must be available"},
		{"no version directory", "identity_fp32", map[string]string{"file:": model}, 400, "invalid file parameter 'file:'"},
		{"name over NAME_MAX", "identity_fp32", map[string]string{"file:1/" + strings.Repeat("n", 300): model}, 500, "failed to load 'identity_fp32', failed to poll from model repository"},
		// os.Root walks a path one directory at a time, so a path longer
		// than PATH_MAX is written, inside.
		{"path over PATH_MAX", "identity_fp32", map[string]string{"file:1/model.py": model, "file:1/" + strings.Repeat("d/", 2100) + "m.py": model}, 200, ""},
		{"through a planted symlink", "identity_fp32", map[string]string{"file:1/model.py": model,
			"file:1/x/data.bin": base64.StdEncoding.EncodeToString([]byte("data"))}, 500, "failed to load 'identity_fp32', failed to poll from model repository"},
		{"model name climbing out", "../../" + filepath.Base(outside) + "/m", map[string]string{"file:1/model.py": model}, 400, "invalid model name"},
		{"model name dot dot", "..", map[string]string{"file:1/model.py": model}, 400, "invalid model name '..', model name must not contain path traversal characters"},
		{"model name of spaces", "%20%20", map[string]string{"file:1/model.py": model}, 400, "Model name cannot be empty. Please enter a valid name to deploy."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, text := load(c.model, c.files)
			if code != c.code || !strings.Contains(text, c.text) {
				t.Errorf("got %d %q, want %d with %q", code, text, c.code, c.text)
			}
		})
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("a load request wrote outside its directory: %v", ents)
	}
	// A Python model's name must also be one Triton's Python backend starts
	// a stub for (NVIDIA's model_control test loads these with their own
	// config and model.py).
	t.Run("Python model names", func(t *testing.T) {
		for _, name := range []string{`model\test`, "model;test", "model`test`", "model(test)", "model!test"} {
			cfg := strings.Replace(identityConfig, `"identity_fp32"`, strconv.Quote(name), 1)
			code, body := s.postJSON("/v2/repository/models/"+url.PathEscape(name)+"/load", map[string]any{"parameters": map[string]any{
				"config": cfg, "file:1/model.py": model}})
			if want := "failed to load '" + name + "': Invalid stub name: contains invalid characters"; code != 400 || errorText(body) != want {
				t.Errorf("%s: %d %s, want 400 %q", name, code, body, want)
			}
		}
		cfg := strings.Replace(identityConfig, `"identity_fp32"`, `"model-with_hyphens"`, 1)
		if code, body := s.postJSON("/v2/repository/models/model-with_hyphens/load", map[string]any{"parameters": map[string]any{
			"config": cfg, "file:1/model.py": model}}); code != 200 {
			t.Errorf("model-with_hyphens: %d %s", code, body)
		}
	})
	t.Run("gRPC model name", func(t *testing.T) {
		_, client := grpcClient(t, s)
		_, err := client.RepositoryModelLoad(callCtx(t), &pb.RepositoryModelLoadRequest{ModelName: "../escape",
			Parameters: map[string]*pb.ModelRepositoryParameter{
				"config":          {ParameterChoice: &pb.ModelRepositoryParameter_StringParam{StringParam: identityConfig}},
				"file:1/model.py": {ParameterChoice: &pb.ModelRepositoryParameter_BytesParam{BytesParam: []byte(doubleModel)}},
			}})
		wantStatus(t, err, codes.InvalidArgument, "invalid model name")
	})
	t.Run("BLS model name", func(t *testing.T) {
		code, body := s.postJSON("/v2/models/model_control/infer", map[string]any{"inputs": []any{},
			"parameters": map[string]any{"op": "load", "model": "../escape", "config": identityConfig, "file:1/model.py": doubleModel}})
		if code == http.StatusOK || !strings.Contains(errorText(body), "invalid model name") {
			t.Errorf("load_model('../escape'): %d %s", code, body)
		}
	})
	t.Run("a plain override still loads", func(t *testing.T) {
		if code, text := load("identity_fp32", map[string]string{"file:1/model.py": model}); code != 200 {
			t.Errorf("got %d %q", code, text)
		}
	})
}

// TestControlModeNoneLoadsNothing: with --model-control-mode=none no
// request loads or unloads a model: not HTTP, not gRPC, not a model's
// pb_utils.load_model.
func TestControlModeNoneLoadsNothing(t *testing.T) {
	ipctest.RequirePython(t)
	repo := copyRepo(t, "model_control")
	cfg := filepath.Join(repo, "model_control", "config.pbtxt")
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// No load at initialize: that would fail the model itself here.
	b = []byte(strings.Replace(string(b), `parameters { key: "LOAD_AT_INIT" value: { string_value: "add_sub" } }`, "", 1))
	if err := os.WriteFile(cfg, b, 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, repo, "--model-control-mode", "none")
	const want = "explicit model load / unload is not allowed if polling is enabled"
	code, body := s.postJSON("/v2/repository/models/outsider/load", map[string]any{"parameters": map[string]any{
		"config": identityConfig, "file:1/model.py": base64.StdEncoding.EncodeToString([]byte(doubleModel))}})
	if code != 503 || errorText(body) != want {
		t.Errorf("HTTP load: %d %s", code, body)
	}
	_, client := grpcClient(t, s)
	_, err = client.RepositoryModelLoad(callCtx(t), &pb.RepositoryModelLoadRequest{ModelName: "outsider"})
	wantStatus(t, err, codes.Unavailable, want)
	_, err = client.RepositoryModelUnload(callCtx(t), &pb.RepositoryModelUnloadRequest{ModelName: "model_control"})
	wantStatus(t, err, codes.Unavailable, want)
	code, body = s.postJSON("/v2/models/model_control/infer", map[string]any{"inputs": []any{},
		"parameters": map[string]any{"op": "load", "model": "outsider", "config": identityConfig, "file:1/model.py": doubleModel}})
	if code == http.StatusOK || !strings.Contains(errorText(body), want) {
		t.Errorf("BLS load_model: %d %s", code, body)
	}
	code, body = s.postJSON("/v2/models/model_control/infer", map[string]any{"inputs": []any{},
		"parameters": map[string]any{"op": "unload", "model": "model_control"}})
	if code == http.StatusOK || !strings.Contains(errorText(body), want) {
		t.Errorf("BLS unload_model: %d %s", code, body)
	}
	if code, _, _ := s.do("GET", "/v2/models/outsider/ready", nil); code == 200 {
		t.Error("outsider is ready")
	}
	if code, _, _ := s.do("GET", "/v2/models/model_control/ready", nil); code != 200 {
		t.Error("model_control is no longer ready")
	}
}

// TestStubHoldsOnlyItsRegion: the shared-memory regions (memfds) a stub
// holds are its own; no stub holds another's.
func TestStubHoldsOnlyItsRegion(t *testing.T) {
	ipctest.RequirePython(t)
	s := startServer(t, copyRepo(t, "add_sub", "identity_fp32"))
	stubs := childrenOf(s.cmd.Process.Pid)
	if len(stubs) < 2 {
		t.Fatalf("want two stubs, have %v", stubs)
	}
	owner := map[uint64]int{} // memfd inode -> stub
	for _, pid := range stubs {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, fd := range fds {
			p := fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())
			target, _ := os.Readlink(p)
			if !strings.HasPrefix(target, "/memfd:") {
				continue
			}
			var st syscall.Stat_t
			if err := syscall.Stat(p, &st); err != nil {
				continue
			}
			if other, ok := owner[st.Ino]; ok && other != pid {
				t.Errorf("stubs %d and %d share the memfd %s", other, pid, target)
			}
			owner[st.Ino] = pid
			n++
		}
		if n == 0 {
			t.Errorf("stub %d holds no memfd region", pid)
		}
	}
}
