package pyenv

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

const sysPython = "/usr/bin/python3"

func needPython(t *testing.T) {
	t.Helper()
	if err := exec.Command(sysPython, "-c", "import numpy").Run(); err != nil {
		t.Skip("needs /usr/bin/python3 with numpy")
	}
}

// tarEntry is one entry of a test archive.
type tarEntry struct {
	name, body, link string
	typ              byte
}

// envEntries is a minimal environment: bin/python3 links to the system
// interpreter, and a marker file.
var envEntries = []tarEntry{
	{name: "bin/", typ: tar.TypeDir},
	{name: "bin/python3", link: sysPython, typ: tar.TypeSymlink},
	{name: "lib/marker.txt", body: "packed", typ: tar.TypeReg},
	{name: "lib/marker-link.txt", link: "lib/marker.txt", typ: tar.TypeLink},
}

func writeTar(t *testing.T, path string, entries []tarEntry) string {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var w io.Writer = f
	if strings.HasSuffix(path, "gz") {
		gz := gzip.NewWriter(f)
		defer gz.Close()
		w = gz
	}
	tw := tar.NewWriter(w)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: 0o755, Size: int64(len(e.body))}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func venv(t *testing.T, systemSite bool) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "venv")
	args := []string{"-m", "venv", "--without-pip"}
	if systemSite {
		args = append(args, "--system-site-packages")
	}
	if b, err := exec.Command(sysPython, append(args, dir)...).CombinedOutput(); err != nil {
		t.Skipf("python3 -m venv: %v: %s", err, b)
	}
	return dir
}

func TestPrepare(t *testing.T) {
	needPython(t)
	src := t.TempDir()
	plain := filepath.Join(src, "plain")
	if err := os.MkdirAll(filepath.Join(plain, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(sysPython, filepath.Join(plain, "bin", "python3")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		path     string
		unpacked bool
		wantErr  string
	}{
		{name: "tar.gz", path: writeTar(t, filepath.Join(src, "env.tar.gz"), envEntries), unpacked: true},
		{name: "tgz", path: writeTar(t, filepath.Join(src, "env2.tgz"), append(envEntries, tarEntry{name: "x", typ: tar.TypeReg, body: "2"})), unpacked: true},
		{name: "plain tar", path: writeTar(t, filepath.Join(src, "env.tar"), envEntries[:3]), unpacked: true},
		{name: "directory", path: plain},
		{name: "venv", path: venv(t, true)},
		{name: "missing", path: filepath.Join(src, "nope.tar.gz"), wantErr: "no such file"},
		{name: "no interpreter", path: writeTar(t, filepath.Join(src, "empty.tar.gz"), envEntries[2:3]), wantErr: "has no bin/python3"},
		{name: "escaping entry", path: writeTar(t, filepath.Join(src, "evil.tar"), []tarEntry{{name: "../evil", typ: tar.TypeReg, body: "x"}}), wantErr: "escapes the archive"},
		{name: "not an archive", path: writeTar(t, filepath.Join(src, "bad.tgz"), nil) + "", wantErr: "unpack"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "not an archive" {
				if err := os.WriteFile(tc.path, []byte("not gzip"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			c := NewCache(t.TempDir())
			env, err := c.Prepare(tc.path)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrEnv) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Prepare = %+v, %v; want ErrEnv with %q", env, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if env.Unpacked != tc.unpacked || env.Python != filepath.Join(env.Root, "bin", "python3") {
				t.Errorf("Prepare = %+v; want unpacked %v", env, tc.unpacked)
			}
			if it, err := c.Check(env.Python); err != nil || it.Numpy == "" {
				t.Errorf("Check(%s) = %+v, %v", env.Python, it, err)
			}
			if tc.name == "tar.gz" {
				if b, err := os.ReadFile(filepath.Join(env.Root, "lib", "marker-link.txt")); err != nil || string(b) != "packed" {
					t.Errorf("hard link: %q %v", b, err)
				}
			}
		})
	}
}

// TestUnpackOnce: the same bytes are unpacked once, whatever path names
// them, across Caches on one directory (servers, restarts) and
// concurrent loads.
func TestUnpackOnce(t *testing.T) {
	src, cacheDir := t.TempDir(), t.TempDir()
	archive := writeTar(t, filepath.Join(src, "env.tar.gz"), envEntries)

	const loads = 8
	var wg sync.WaitGroup
	envs := make([]Env, 2*loads)
	errs := make([]error, 2*loads)
	caches := []*Cache{NewCache(cacheDir), NewCache(cacheDir)} // two servers
	for i := range envs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			envs[i], errs[i] = caches[i%2].Prepare(archive)
		}()
	}
	wg.Wait()
	unpacked := 0
	for i, env := range envs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if env.Root != envs[0].Root {
			t.Fatalf("load %d got %s, load 0 %s", i, env.Root, envs[0].Root)
		}
		if env.Unpacked {
			unpacked++
		}
	}
	if unpacked != 1 {
		t.Fatalf("%d of %d concurrent loads unpacked the archive, want 1", unpacked, len(envs))
	}

	// A restarted server, and the same bytes under another name.
	copyPath := filepath.Join(src, "copy.tar.gz")
	b, _ := os.ReadFile(archive)
	if err := os.WriteFile(copyPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{archive, copyPath} {
		env, err := NewCache(cacheDir).Prepare(path)
		if err != nil || env.Unpacked || env.Root != envs[0].Root {
			t.Fatalf("Prepare(%s) after a restart = %+v, %v; want %s reused", path, env, err, envs[0].Root)
		}
	}
	// Other bytes are another environment.
	other := writeTar(t, filepath.Join(src, "other.tar.gz"), append(envEntries, tarEntry{name: "extra", typ: tar.TypeReg, body: "x"}))
	env, err := NewCache(cacheDir).Prepare(other)
	if err != nil || !env.Unpacked || env.Root == envs[0].Root {
		t.Fatalf("Prepare(other bytes) = %+v, %v; want a fresh unpack", env, err)
	}
	// No temporary directory is left behind.
	left, _ := filepath.Glob(filepath.Join(cacheDir, "envs", ".unpack-*"))
	if len(left) != 0 {
		t.Errorf("temporary directories left: %v", left)
	}
}

func TestCheck(t *testing.T) {
	needPython(t)
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// An interpreter that reports Python 3.6: the real one with a
	// sitecustomize that rewrites sys.version_info.
	old := filepath.Join(dir, "old")
	if err := os.MkdirAll(old, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(old, "sitecustomize.py"), []byte("import sys\nsys.version_info = (3, 6, 9, 'final', 0)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, python, wantErr string
	}{
		{"system python", sysPython, ""},
		{"venv with system packages", filepath.Join(venv(t, true), "bin", "python3"), ""},
		{"venv without numpy", filepath.Join(venv(t, false), "bin", "python3"), "cannot import numpy, which the Python stub needs: ModuleNotFoundError: No module named 'numpy'"},
		{"too old", script("py36", "#!/bin/sh\nPYTHONPATH="+old+" exec "+sysPython+" \"$@\"\n"), "is Python 3.6.9; the Python stub needs Python 3.8 or newer"},
		{"does not run", script("broken", "#!/bin/sh\necho 'error while loading shared libraries: libpython3.9.so.1.0' >&2\nexit 127\n"), "does not run: error while loading shared libraries"},
		{"missing", filepath.Join(dir, "absent"), "does not run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCache(t.TempDir())
			it, err := c.Check(tc.python)
			if tc.wantErr == "" {
				if err != nil || it.Numpy == "" || !atLeast(it.Version, MinPython) || it.Took == 0 {
					t.Fatalf("Check = %+v, %v", it, err)
				}
				// A second check of the same file is remembered.
				if again, err := c.Check(tc.python); err != nil || again.Took != 0 || again.Version != it.Version {
					t.Errorf("second Check = %+v, %v; want the remembered pass", again, err)
				}
				return
			}
			if !errors.Is(err, ErrInterpreter) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Check = %+v, %v; want ErrInterpreter with %q", it, err, tc.wantErr)
			}
		})
	}
}

func TestAtLeast(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want bool
	}{{"3.8.0", true}, {"3.11.2", true}, {"4.0.0", true}, {"3.7.17", false}, {"2.7.18", false}, {"3", false}, {"x.y", false}} {
		if got := atLeast(tc.v, [2]int{3, 8}); got != tc.want {
			t.Errorf("atLeast(%q) = %v", tc.v, got)
		}
	}
}

func TestVars(t *testing.T) {
	t.Setenv("PATH", "/usr/bin")
	t.Setenv("LD_LIBRARY_PATH", "")
	got := Env{Root: "/cache/envs/abc"}.Vars()
	want := []string{"PATH=/cache/envs/abc/bin:/usr/bin", "LD_LIBRARY_PATH=/cache/envs/abc/lib"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("Vars = %q, want %q", got, want)
	}
}
