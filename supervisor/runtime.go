package supervisor

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/backendapi/modelconfig"
)

// prepMu serialises unpacking environments and building Go models, which
// share cache directories.
var prepMu sync.Mutex

// interpreterFor returns the Python interpreter of a model: the server's,
// or bin/python3 of the model's EXECUTION_ENV_PATH (a directory, or a
// .tar.gz/.tgz/.tar packed environment unpacked once into the cache).
// "$$TRITON_MODEL_DIRECTORY" in the path is the model directory, as in
// Triton.
func (s *Supervisor) interpreterFor(cfg *inferencepb.ModelConfig, dir string) (string, error) {
	env, ok := modelconfig.Parameter(cfg, modelconfig.ParamExecutionEnvPath)
	if !ok || env == "" {
		return s.opts.Python, nil
	}
	env = strings.ReplaceAll(env, "$$TRITON_MODEL_DIRECTORY", dir)
	if !filepath.IsAbs(env) {
		env = filepath.Join(dir, env)
	}
	info, err := os.Stat(env)
	if err != nil {
		return "", backendapi.Errorf(backendapi.InvalidArg, "model '%s': EXECUTION_ENV_PATH: %v", cfg.GetName(), err)
	}
	root := env
	if !info.IsDir() {
		if root, err = s.unpackEnv(env, info); err != nil {
			return "", backendapi.Errorf(backendapi.InvalidArg, "model '%s': EXECUTION_ENV_PATH: %v", cfg.GetName(), err)
		}
	}
	py := filepath.Join(root, "bin", "python3")
	if _, err := os.Stat(py); err != nil {
		return "", backendapi.Errorf(backendapi.InvalidArg, "model '%s': EXECUTION_ENV_PATH %s has no bin/python3", cfg.GetName(), env)
	}
	return py, nil
}

// unpackEnv unpacks a packed environment once; the cache key is the
// archive's path, size and modification time.
func (s *Supervisor) unpackEnv(archive string, info fs.FileInfo) (string, error) {
	key := sha256.Sum256([]byte(fmt.Sprintf("%s|%d|%d", archive, info.Size(), info.ModTime().UnixNano())))
	dest := filepath.Join(s.opts.CacheDir, "envs", hex.EncodeToString(key[:8]))
	prepMu.Lock()
	defer prepMu.Unlock()
	if _, err := os.Stat(dest); err == nil {
		return dest, nil
	}
	tmp := dest + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := untar(archive, tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return "", fmt.Errorf("unpack %s: %w", archive, err)
	}
	if err := os.Rename(tmp, dest); err != nil {
		return "", fmt.Errorf("unpack %s: %w", archive, err)
	}
	return dest, nil
}

// untar extracts a tar or gzip-compressed tar, refusing entries that would
// land outside dest.
func untar(archive, dest string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(archive, ".gz") || strings.HasSuffix(archive, ".tgz") {
		gz, err := gzip.NewReader(f)
		if err != nil {
			return err
		}
		defer gz.Close()
		r = gz
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(h.Name)
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("entry %q escapes the archive", h.Name)
		}
		path := filepath.Join(dest, name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(path, 0o755)
		case tar.TypeReg:
			if err = os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
				err = writeFile(path, tr, fs.FileMode(h.Mode)&0o777)
			}
		case tar.TypeSymlink:
			if err = os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
				err = os.Symlink(h.Linkname, path)
			}
		}
		if err != nil {
			return err
		}
	}
}

func writeFile(path string, r io.Reader, mode fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// goModelBinary returns the executable of a Go-native model version: the
// file named by default_model_filename in the version directory, or, when
// that is absent and the directory holds Go sources, a binary built from
// them with the Go toolchain into the cache (rebuilt when a source changes).
func (s *Supervisor) goModelBinary(mv *modelVersion) (string, error) {
	if info, err := os.Stat(mv.modelFile); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
		return mv.modelFile, nil
	}
	vdir := filepath.Join(mv.dir, strconv.FormatInt(mv.version, 10))
	sources, _ := filepath.Glob(filepath.Join(vdir, "*.go"))
	if len(sources) == 0 {
		return "", backendapi.Errorf(backendapi.InvalidArg, "model '%s' version %d: no executable %s and no Go sources to build one from", mv.name, mv.version, mv.modelFile)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		if _, statErr := os.Stat("/usr/local/go/bin/go"); statErr == nil {
			goTool = "/usr/local/go/bin/go"
		} else {
			return "", backendapi.Errorf(backendapi.InvalidArg, "model '%s' version %d: %s is missing and no Go toolchain is installed to build it from the sources", mv.name, mv.version, mv.modelFile)
		}
	}
	h := sha256.New()
	// The model links the stub library of this very server: a rebuilt
	// server must rebuild its models too.
	if exe, err := os.Executable(); err == nil {
		if info, err := os.Stat(exe); err == nil {
			fmt.Fprintf(h, "%s %d %d\n", exe, info.Size(), info.ModTime().UnixNano())
		}
	}
	for _, src := range sources {
		b, err := os.ReadFile(src)
		if err != nil {
			return "", backendapi.Errorf(backendapi.InvalidArg, "model '%s': %v", mv.name, err)
		}
		h.Write([]byte(src))
		h.Write(b)
	}
	out := filepath.Join(s.opts.CacheDir, "gomodels", mv.name+"-"+hex.EncodeToString(h.Sum(nil))[:16])
	prepMu.Lock()
	defer prepMu.Unlock()
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", backendapi.Errorf(backendapi.Internal, "model '%s': %v", mv.name, err)
	}
	s.log.Info("building Go model", "model", mv.name, "version", mv.version, "dir", vdir)
	cmd := exec.Command(goTool, "build", "-o", out+".tmp", ".")
	cmd.Dir = vdir
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", backendapi.Errorf(backendapi.InvalidArg, "model '%s' version %d: go build failed: %s", mv.name, mv.version, strings.TrimSpace(string(b)))
	}
	if err := os.Rename(out+".tmp", out); err != nil {
		return "", backendapi.Errorf(backendapi.Internal, "model '%s': %v", mv.name, err)
	}
	return out, nil
}
