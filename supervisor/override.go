package supervisor

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/stubvisor/stubvisor/backendapi"
)

// A load request may bring a model's files (file:<version>/<path>); they
// are written to a directory of their own in the cache, and nothing of the
// request may lead a write anywhere else.

// checkModelName refuses a model name that is not a single path
// element, with Triton's texts: the name becomes a directory name (file
// overrides), so '/', NUL, "." and ".." could name another place. Triton
// refuses only ".." and '/' this way; NUL and "." are ours. (A Python
// model's name has more rules: stubNameInvalidChars.)
func checkModelName(name string) error {
	trimmed := strings.TrimSpace(name)
	if trimmed == "" {
		return backendapi.Errorf(backendapi.InvalidArg, "Model name cannot be empty. Please enter a valid name to deploy.")
	}
	if trimmed == "." || trimmed == ".." || strings.ContainsAny(name, "/\x00") {
		return backendapi.Errorf(backendapi.InvalidArg, "invalid model name '%s', model name must not contain path traversal characters", name)
	}
	return nil
}

// writeOverride materialises the file:<version>/<path> contents of a load
// request as a model directory in the cache.
func (s *Supervisor) writeOverride(name string, files map[string][]byte) (string, error) {
	h := sha256.New()
	keys := make([]string, 0, len(files))
	for k := range files {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		h.Write([]byte(k))
		h.Write(files[k])
	}
	dir := filepath.Join(s.opts.CacheDir, "override", name+"-"+hex.EncodeToString(h.Sum(nil))[:16], name)
	fail := func(err error) (string, error) {
		// A path the file system refuses (a name over NAME_MAX, say) is
		// Triton's repository poll failure; the cause goes to the log.
		s.log.Error("failed to write the load request's files", "model", name, "error", err)
		return "", pollFailed(name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	// Every write goes through an os.Root of the model's directory: a path
	// that climbs out of it, by ".." or by a symbolic link already there,
	// fails instead of writing elsewhere.
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fail(err)
	}
	defer root.Close()
	for _, k := range keys {
		rel := strings.TrimPrefix(k, "file:")
		// Triton joins the path to the model's directory, so a leading
		// slash ("file:/1/model.py") names the same file as none.
		clean := filepath.Clean(strings.TrimLeft(rel, "/"))
		if rel == k || filepath.IsAbs(clean) || clean == "." || strings.HasPrefix(clean, "..") {
			return "", backendapi.Errorf(backendapi.InvalidArg, "failed to load '%s': invalid file parameter '%s'", name, k)
		}
		if err := root.MkdirAll(filepath.Dir(clean), 0o755); err != nil {
			return fail(err)
		}
		if err := root.WriteFile(clean, files[k], 0o644); err != nil {
			return fail(err)
		}
	}
	return dir, nil
}
