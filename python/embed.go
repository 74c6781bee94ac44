// Package python carries the Python stub inside the Go binary: the
// stubvisor package (the stub host and its shared-memory transport) and
// triton_python_backend_utils, the module Python-backend models import.
//
// The supervisor calls Extract once, then starts each Python stub as
//
//	<interpreter> -m stubvisor
//
// with PYTHONPATH set to the returned directory, the region as fd 3 and
// STUBVISOR_INSTANCE set to the instance name (ipc/process.go). Shipping the stub inside the
// binary keeps the Go and Python halves of the wire protocol at the same
// version: there is nothing to install and nothing to drift.
package python

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
)

// Module is the name to pass to the interpreter's -m flag.
const Module = "stubvisor"

// The directory pattern adds what the Makefile built beside the sources
// (the compiled fast path, stubvisor/fastpath<EXT_SUFFIX>, see
// stubvisor/native.py) and matches even when nothing was built, so a plain
// go build still compiles (its stub runs the pure-Python path). It skips
// names starting with "_" or "."; stubvisor/*.py brings __init__.py and
// __main__.py.
//
//go:embed stubvisor/*.py stubvisor triton_python_backend_utils.py
var files embed.FS

// FS returns the embedded stub sources, rooted where PYTHONPATH points.
func FS() fs.FS { return files }

// ErrExtract is wrapped by every error Extract returns.
var ErrExtract = errors.New("python: extract stub")

// Extract writes the embedded stub into a subdirectory of dir named after a
// hash of its contents and returns that subdirectory, the value for
// PYTHONPATH. The files are written to a temporary directory and renamed
// into place, so a directory under the final name is always complete; one
// that exists already (from an earlier run or a concurrent Extract) is
// reused as is.
func Extract(dir string) (string, error) {
	sum, err := digest()
	if err != nil {
		return "", fmt.Errorf("%w: hash sources: %w", ErrExtract, err)
	}
	target := filepath.Join(dir, "stubvisor-py-"+sum[:16])
	if st, err := os.Stat(target); err == nil && st.IsDir() {
		return target, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("%w: create %s: %w", ErrExtract, dir, err)
	}
	tmp, err := os.MkdirTemp(dir, ".stubvisor-py-tmp-")
	if err != nil {
		return "", fmt.Errorf("%w: create temporary directory: %w", ErrExtract, err)
	}
	if err := writeTree(tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return "", fmt.Errorf("%w: %w", ErrExtract, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		_ = os.RemoveAll(tmp)
		return "", fmt.Errorf("%w: chmod %s: %w", ErrExtract, tmp, err)
	}
	if err := os.Rename(tmp, target); err != nil {
		_ = os.RemoveAll(tmp)
		// Another Extract may have won the race: its tree is complete.
		if st, serr := os.Stat(target); serr == nil && st.IsDir() {
			return target, nil
		}
		return "", fmt.Errorf("%w: rename into %s: %w", ErrExtract, target, err)
	}
	return target, nil
}

// writeTree writes every embedded file under root.
func writeTree(root string) error {
	return fs.WalkDir(files, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(root, filepath.FromSlash(name))
		if d.IsDir() {
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return fmt.Errorf("create %s: %w", dst, err)
			}
			return nil
		}
		data, err := files.ReadFile(name)
		if err != nil {
			return fmt.Errorf("read embedded %s: %w", name, err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", dst, err)
		}
		return nil
	})
}

// digest hashes the embedded file names and contents in a fixed order.
func digest() (string, error) {
	var names []string
	err := fs.WalkDir(files, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			names = append(names, name)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	h := sha256.New()
	for _, name := range names {
		data, err := files.ReadFile(name)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path.Clean(name), len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
