package modelconfig_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/backendapi/modelconfig"
)

// makeTree creates files and directories under root: a path ending in "/"
// is a directory, any other is a file with the given content.
func makeTree(t *testing.T, root string, entries map[string]string) {
	t.Helper()
	for path, content := range entries {
		full := filepath.Join(root, path)
		if strings.HasSuffix(path, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestScanRepository(t *testing.T) {
	repoA, repoB := t.TempDir(), t.TempDir()
	makeTree(t, repoA, map[string]string{
		"add_sub/config.pbtxt":     `name: "add_sub"`,
		"add_sub/1/model.py":       "",
		"no_config/2/model.py":     "", // a version directory is enough
		"config_only/config.pbtxt": "",
		"not_a_model/README":       "", // neither config nor version
		"not_a_model/v1/":          "",
		"zero_padded/01/":          "",
		".hidden/config.pbtxt":     "",
		"plain_file":               "",
		"shared/config.pbtxt":      "",
	})
	makeTree(t, repoB, map[string]string{
		"shared/1/": "",
		"other/3/":  "",
	})
	// A symbolic link to a model directory elsewhere is a model.
	outside := t.TempDir()
	makeTree(t, outside, map[string]string{"linked/config.pbtxt": ""})
	if err := os.Symlink(filepath.Join(outside, "linked"), filepath.Join(repoB, "linked")); err != nil {
		t.Fatal(err)
	}
	// A dangling link is skipped.
	if err := os.Symlink(filepath.Join(outside, "gone"), filepath.Join(repoB, "dangling")); err != nil {
		t.Fatal(err)
	}

	got, err := modelconfig.ScanRepository([]string{repoA, repoB})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name, repo string
		dup        bool
	}{
		{"add_sub", repoA, false},
		{"config_only", repoA, false},
		{"linked", repoB, false},
		{"no_config", repoA, false},
		{"other", repoB, false},
		{"shared", repoA, true},
	}
	if len(got) != len(want) {
		t.Fatalf("ScanRepository = %+v, want %d models", got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Name != w.name || g.Repository != w.repo || g.Path != filepath.Join(w.repo, w.name) {
			t.Errorf("model %d = %+v, want %s in %s", i, g, w.name, w.repo)
		}
		if !w.dup {
			if g.Err != nil {
				t.Errorf("%s: Err = %v", g.Name, g.Err)
			}
			continue
		}
		if g.Err == nil {
			t.Errorf("%s: no error for a duplicate name", g.Name)
			continue
		}
		assertError(t, g.Err, modelconfig.ErrDuplicateModel, backendapi.InvalidArg)
		for _, repo := range []string{repoA, repoB} {
			if !strings.Contains(g.Err.Error(), filepath.Join(repo, "shared")) {
				t.Errorf("duplicate error %q does not name %s", g.Err, repo)
			}
		}
	}
}

func TestScanRepositoryErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	_, err := modelconfig.ScanRepository([]string{missing})
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("ScanRepository(missing) = %v, want a not-exist error naming the path", err)
	}
	got, err := modelconfig.ScanRepository(nil)
	if err != nil || len(got) != 0 {
		t.Errorf("ScanRepository(nil) = %v, %v", got, err)
	}
}

func TestVersions(t *testing.T) {
	dir := t.TempDir()
	makeTree(t, dir, map[string]string{
		"1/model.py": "", "2/": "", "3/": "", "10/": "",
		"01/": "", "0/": "", "-4/": "", "+5/": "", "v6/": "", "7": "not a directory",
		"config.pbtxt": "",
	})
	tests := []struct {
		name   string
		policy string
		want   []int64
	}{
		{"default is latest one", ``, []int64{10}},
		{"latest two", `version_policy { latest { num_versions: 2 } }`, []int64{3, 10}},
		{"latest more than present", `version_policy { latest { num_versions: 9 } }`, []int64{1, 2, 3, 10}},
		{"all", `version_policy { all { } }`, []int64{1, 2, 3, 10}},
		{"specific keeps the present ones", `version_policy { specific { versions: [ 10, 2, 5, 7 ] } }`, []int64{2, 10}},
		{"unset policy means latest", `name: "m"`, []int64{10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := parseText(t, tt.policy)
			if tt.policy != `name: "m"` {
				modelconfig.Normalize(cfg, dir)
			}
			got, err := modelconfig.Versions(cfg, dir)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Versions = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestVersionsErrors(t *testing.T) {
	dir := t.TempDir()
	makeTree(t, dir, map[string]string{"1/": "", "2/": ""})
	empty := t.TempDir()
	tests := []struct {
		name   string
		policy string
		dir    string
	}{
		{"specific absent", `name: "m" version_policy { specific { versions: [ 3 ] } }`, dir},
		{"latest zero", `name: "m" version_policy { latest { num_versions: 0 } }`, dir},
		{"no version directory", `name: "m" version_policy { all { } }`, empty},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := modelconfig.Versions(parseText(t, tt.policy), tt.dir)
			if err == nil {
				t.Fatalf("Versions = %v, want an error", got)
			}
			if want := "at least one version must be available under the version policy of model 'm'"; err.Error() != want {
				t.Errorf("error = %q, want %q", err, want)
			}
			assertError(t, err, modelconfig.ErrNoVersions, backendapi.InvalidArg)
		})
	}
	if _, err := modelconfig.Versions(parseText(t, `name: "m"`), filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Versions(missing dir) = %v, want a not-exist error", err)
	}
}

func TestParseVersion(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1", 1, true}, {"20", 20, true}, {"9223372036854775807", 9223372036854775807, true},
		{"0", 0, false}, {"01", 0, false}, {"-1", 0, false}, {"+1", 0, false}, {"1a", 0, false},
		{"", 0, false}, {"9223372036854775808", 0, false}, {" 1", 0, false},
	}
	for _, tt := range tests {
		if v, ok := modelconfig.ParseVersion(tt.in); v != tt.want || ok != tt.ok {
			t.Errorf("ParseVersion(%q) = %d, %v; want %d, %v", tt.in, v, ok, tt.want, tt.ok)
		}
	}
}

func TestLoad(t *testing.T) {
	repo := t.TempDir()
	addSub, err := os.ReadFile(filepath.Join("testdata", "add_sub.pbtxt"))
	if err != nil {
		t.Fatal(err)
	}
	makeTree(t, repo, map[string]string{
		"add_sub/config.pbtxt":     string(addSub),
		"add_sub/1/model.py":       "",
		"bare/1/model.py":          "",
		"broken/config.pbtxt":      "name: \"broken\"\ninput { nmae: \"x\" }\n",
		"invalid/config.pbtxt":     `max_batch_size: -4`,
		"unreadable/config.pbtxt/": "", // a directory where the file belongs
	})

	t.Run("config file", func(t *testing.T) {
		cfg, err := modelconfig.Load(filepath.Join(repo, "add_sub"))
		if err != nil {
			t.Fatal(err)
		}
		want := normalized(t, "add_sub.pbtxt", "add_sub")
		if got, _ := modelconfig.ToJSON(cfg); string(got) != mustJSON(t, want) {
			t.Errorf("Load = %s\nwant   %s", got, mustJSON(t, want))
		}
	})
	t.Run("no config file", func(t *testing.T) {
		cfg, err := modelconfig.Load(filepath.Join(repo, "bare"))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.GetName() != "bare" || modelconfig.Kind(cfg) != modelconfig.KindPython || cfg.GetDefaultModelFilename() != "model.py" {
			t.Errorf("Load(bare) = %v", cfg)
		}
	})
	t.Run("parse error names the file", func(t *testing.T) {
		_, err := modelconfig.Load(filepath.Join(repo, "broken"))
		want := filepath.Join(repo, "broken", "config.pbtxt") + `:2: unknown field "nmae" in inference.ModelInput`
		if err == nil || err.Error() != want {
			t.Fatalf("Load error = %v, want %s", err, want)
		}
		assertError(t, err, modelconfig.ErrParse, backendapi.InvalidArg)
	})
	t.Run("validation error", func(t *testing.T) {
		_, err := modelconfig.Load(filepath.Join(repo, "invalid"))
		if err == nil || err.Error() != "'max_batch_size' must be non-negative value for invalid" {
			t.Fatalf("Load error = %v", err)
		}
		assertError(t, err, modelconfig.ErrInvalid, backendapi.InvalidArg)
	})
	t.Run("read error", func(t *testing.T) {
		_, err := modelconfig.Load(filepath.Join(repo, "unreadable"))
		if err == nil || !strings.Contains(err.Error(), "config.pbtxt") || errors.Is(err, modelconfig.ErrParse) {
			t.Fatalf("Load error = %v, want a read error naming config.pbtxt", err)
		}
	})
}

func mustJSON(t *testing.T, cfg *inferencepb.ModelConfig) string {
	t.Helper()
	data, err := modelconfig.ToJSON(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
