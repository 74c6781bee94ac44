package modelconfig

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

// ModelDir is one model directory of a model repository.
type ModelDir struct {
	// Name is the directory name, which is the model name.
	Name string
	// Repository is the repository directory the model was found in (the
	// first one, for a duplicate).
	Repository string
	// Path is the model directory: Repository/Name.
	Path string
	// Err is non-nil when the model cannot be used as found; it matches
	// ErrDuplicateModel when Name is in more than one repository (then no
	// copy of the model may be loaded, as in Triton).
	Err error
}

// ScanRepository lists the model directories of the given repositories,
// sorted by name. A model directory is a subdirectory (symbolic links are
// followed) that holds a config.pbtxt or at least one version directory;
// other entries, and names starting with '.', are skipped. A model name
// found in several repositories is listed once, with Err set. A repository
// that cannot be read is an error.
func ScanRepository(dirs []string) ([]ModelDir, error) {
	byName := map[string]*ModelDir{}
	var found []string // paths per name, for duplicate messages
	where := map[string][]string{}
	for _, repo := range dirs {
		entries, err := os.ReadDir(repo)
		if err != nil {
			return nil, fmt.Errorf("modelconfig: scan repository %s: %w", repo, err)
		}
		for _, e := range entries {
			name := e.Name()
			if strings.HasPrefix(name, ".") {
				continue
			}
			path := filepath.Join(repo, name)
			if !isModelDir(path) {
				continue
			}
			where[name] = append(where[name], path)
			if _, dup := byName[name]; dup {
				continue
			}
			byName[name] = &ModelDir{Name: name, Repository: repo, Path: path}
			found = append(found, name)
		}
	}
	slices.Sort(found)
	out := make([]ModelDir, 0, len(found))
	for _, name := range found {
		md := byName[name]
		if paths := where[name]; len(paths) > 1 {
			md.Err = newError(ErrDuplicateModel, backendapi.InvalidArg,
				"failed to load '%s': model name is not unique across all model repositories (found in %s)",
				name, strings.Join(paths, ", "))
		}
		out = append(out, *md)
	}
	return out, nil
}

// isModelDir reports whether path is a directory holding a config.pbtxt or
// a version directory.
func isModelDir(path string) bool {
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		return false
	}
	if fi, err := os.Stat(filepath.Join(path, ConfigFileName)); err == nil && fi.Mode().IsRegular() {
		return true
	}
	versions, err := versionDirs(path)
	return err == nil && len(versions) > 0
}

// ParseVersion parses a version directory name: a decimal integer >= 1
// without sign or leading zeros ("1", "20"). Triton likewise ignores
// directories such as "01" or "v1". Version 0 is not accepted because 0
// means "the version policy chooses" throughout the API.
func ParseVersion(name string) (int64, bool) {
	v, err := strconv.ParseInt(name, 10, 64)
	if err != nil || v < 1 || strconv.FormatInt(v, 10) != name {
		return 0, false
	}
	return v, true
}

// versionDirs returns the versions of the version directories under
// modelDir, ascending.
func versionDirs(modelDir string) ([]int64, error) {
	entries, err := os.ReadDir(modelDir)
	if err != nil {
		return nil, err
	}
	var versions []int64
	for _, e := range entries {
		v, ok := ParseVersion(e.Name())
		if !ok {
			continue
		}
		if fi, err := os.Stat(filepath.Join(modelDir, e.Name())); err != nil || !fi.IsDir() {
			continue
		}
		versions = append(versions, v)
	}
	slices.Sort(versions)
	return versions, nil
}

// Versions returns, ascending, the versions of modelDir that cfg's version
// policy selects among the version directories present: the num_versions
// highest (latest, the default with 1), all of them (all), or those listed
// that exist (specific). It fails with ErrNoVersions, in Triton's words,
// when that leaves none.
func Versions(cfg *inferencepb.ModelConfig, modelDir string) ([]int64, error) {
	present, err := versionDirs(modelDir)
	if err != nil {
		return nil, fmt.Errorf("modelconfig: list versions of %s: %w", modelDir, err)
	}
	var selected []int64
	switch p := cfg.GetVersionPolicy().GetPolicyChoice().(type) {
	case *inferencepb.ModelVersionPolicy_All_:
		selected = present
	case *inferencepb.ModelVersionPolicy_Specific_:
		for _, v := range present {
			if slices.Contains(p.Specific.GetVersions(), v) {
				selected = append(selected, v)
			}
		}
	case *inferencepb.ModelVersionPolicy_Latest_:
		n := min(int(p.Latest.GetNumVersions()), len(present))
		selected = present[len(present)-n:]
	default: // no policy: Triton's default, the latest one
		selected = present[max(len(present)-1, 0):]
	}
	if len(selected) == 0 {
		return nil, newError(ErrNoVersions, backendapi.InvalidArg,
			"at least one version must be available under the version policy of model '%s'", cfg.GetName())
	}
	return slices.Clone(selected), nil
}

// Read reads modelDir/config.pbtxt. A model directory without one yields
// an empty config, which Normalize completes (Triton's auto-complete does
// the same for Python models).
func Read(modelDir string) (*inferencepb.ModelConfig, error) {
	path := filepath.Join(modelDir, ConfigFileName)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &inferencepb.ModelConfig{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("modelconfig: read %s: %w", path, err)
	}
	return Parse(path, data)
}

// Load reads, normalizes and validates the configuration of modelDir.
func Load(modelDir string, opts ...Option) (*inferencepb.ModelConfig, error) {
	cfg, err := Read(modelDir)
	if err != nil {
		return nil, err
	}
	Normalize(cfg, modelDir, opts...)
	if err := Validate(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}
