package main

// Python environments (EXECUTION_ENV_PATH) through the built binary: a
// packed environment is unpacked once per content for every model, load
// and server restart; a wrong interpreter fails the load with what is
// wrong.

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// echoPy answers INPUT0 as OUTPUT0.
const echoPy = `import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
`

// writeEnvTarball packs an environment whose bin/python3 is the system
// interpreter, as conda-pack packs one with its own.
func writeEnvTarball(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	for _, h := range []*tar.Header{
		{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "bin/python3", Typeflag: tar.TypeSymlink, Linkname: "/usr/bin/python3"},
		{Name: "conda-meta/history", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			_, _ = tw.Write([]byte("env"))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
}

func withEnvPath(path string) string {
	return fmt.Sprintf(`instance_group [{ kind: KIND_CPU }]
parameters { key: "EXECUTION_ENV_PATH" value { string_value: %q } }`, path)
}

// TestPythonEnvTarballUnpackedOnce: two models name the same packed
// environment (one inside its model directory, one by an absolute path to
// a copy); three servers in turn on one cache directory unpack it once.
func TestPythonEnvTarballUnpackedOnce(t *testing.T) {
	slow(t)
	ipctest.RequirePython(t)
	repo, cache, elsewhere := t.TempDir(), t.TempDir(), t.TempDir()
	writeFP32Model(t, repo, "env_a", withEnvPath("$$TRITON_MODEL_DIRECTORY/env.tar.gz"), echoPy)
	writeFP32Model(t, repo, "env_b", withEnvPath(filepath.Join(elsewhere, "same-env.tar.gz")), echoPy)
	writeEnvTarball(t, filepath.Join(repo, "env_a", "env.tar.gz"))
	b, err := os.ReadFile(filepath.Join(repo, "env_a", "env.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(elsewhere, "same-env.tar.gz"), b, 0o644); err != nil {
		t.Fatal(err)
	}

	var envDir string
	var envIno uint64
	for run := 0; run < 3; run++ {
		s := startServer(t, repo, "--cache-dir", cache)
		for _, m := range []string{"env_a", "env_b"} {
			code, body := s.httpInferJSON(m, map[string]any{
				"inputs": []map[string]any{{"name": "INPUT0", "datatype": "FP32", "shape": []int{2}, "data": []float32{1, 2}}},
			})
			if code != 200 || !strings.Contains(string(body), `"data":[1,2]`) && !strings.Contains(string(body), `"data":[1.0,2.0]`) {
				t.Fatalf("run %d: infer %s: %d %s", run, m, code, body)
			}
			// The stub runs the environment's interpreter.
			cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", oneStub(t, s, m).PID))
			if err != nil {
				t.Fatal(err)
			}
			python := strings.Split(string(cmdline), "\x00")[0]
			if envDir == "" {
				envDir = filepath.Dir(filepath.Dir(python))
				var st syscall.Stat_t
				if err := syscall.Stat(envDir, &st); err != nil {
					t.Fatal(err)
				}
				envIno = st.Ino
			}
			if want := filepath.Join(envDir, "bin", "python3"); python != want || !strings.HasPrefix(envDir, filepath.Join(cache, "envs")) {
				t.Fatalf("run %d: %s's stub runs %s, want %s in the cache", run, m, python, want)
			}
			// The environment is activated: its lib first for the loader.
			environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", oneStub(t, s, m).PID))
			if !strings.Contains(string(environ), "\x00LD_LIBRARY_PATH="+filepath.Join(envDir, "lib")) {
				t.Fatalf("run %d: %s's stub does not have %s/lib first on LD_LIBRARY_PATH", run, m, envDir)
			}
		}
		s.Stop()
		unpacks := strings.Count(s.Log(), "unpacked execution environment")
		if want := map[int]int{0: 1}[run]; unpacks != want {
			t.Fatalf("run %d unpacked the environment %d times, want %d:\n%s", run, unpacks, want, s.Log())
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(envDir, &st); err != nil || st.Ino != envIno {
		t.Errorf("the environment directory was replaced (inode %d, was %d): %v", st.Ino, envIno, err)
	}
	entries, _ := filepath.Glob(filepath.Join(cache, "envs", "*"))
	var envs []string
	for _, e := range entries {
		if filepath.Base(e) != "index" {
			envs = append(envs, e)
		}
	}
	if len(envs) != 1 {
		t.Errorf("the cache holds %d environments, want 1: %v", len(envs), envs)
	}
}

// TestPythonEnvWrongInterpreter: a load whose interpreter cannot serve
// fails with an error that names the interpreter and what is wrong.
func TestPythonEnvWrongInterpreter(t *testing.T) {
	ipctest.RequirePython(t)
	dir := t.TempDir()
	// An environment whose interpreter is Python 3.6 (the system one
	// made to report 3.6.9, as the interpreter of an old conda env would).
	old := filepath.Join(dir, "py36env")
	site := filepath.Join(dir, "site36")
	for _, d := range []string{filepath.Join(old, "bin"), site} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(site, "sitecustomize.py"), []byte("import sys\nsys.version_info = (3, 6, 9, 'final', 0)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(old, "bin", "python3"), []byte("#!/bin/sh\nPYTHONPATH="+site+" exec /usr/bin/python3 \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A venv without numpy: a real interpreter, the stub's dependency
	// missing.
	bare := filepath.Join(dir, "bare-venv")
	if b, err := exec.Command("/usr/bin/python3", "-m", "venv", "--without-pip", bare).CombinedOutput(); err != nil {
		t.Skipf("python3 -m venv: %v: %s", err, b)
	}
	repo := t.TempDir()
	cases := []struct{ model, env, want string }{
		{"env_py36", old, "model 'env_py36': python interpreter: " + filepath.Join(old, "bin", "python3") + " is Python 3.6.9; the Python stub needs Python 3.8 or newer"},
		{"env_no_numpy", bare, "(Python 3.11"},
		{"env_missing", filepath.Join(dir, "absent"), "model 'env_missing': EXECUTION_ENV_PATH: execution environment: stat " + filepath.Join(dir, "absent") + ": no such file or directory"},
	}
	for _, c := range cases {
		writeFP32Model(t, repo, c.model, withEnvPath(c.env), echoPy)
	}
	s := startServer(t, repo, "--model-control-mode", "explicit")
	for _, c := range cases {
		t.Run(c.model, func(t *testing.T) {
			code, body := s.postJSON("/v2/repository/models/"+c.model+"/load", map[string]any{})
			if code != 400 || !strings.Contains(string(body), c.want) {
				t.Fatalf("load: %d %s, want 400 with %q", code, body, c.want)
			}
			if c.model == "env_no_numpy" && !strings.Contains(string(body), "cannot import numpy, which the Python stub needs: ModuleNotFoundError") {
				t.Fatalf("load: %s does not say numpy is missing", body)
			}
		})
	}
}
