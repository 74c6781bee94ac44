package python

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func TestExtractWritesEveryEmbeddedFile(t *testing.T) {
	dir, err := Extract(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"triton_python_backend_utils.py",
		"stubvisor/__init__.py",
		"stubvisor/__main__.py",
		"stubvisor/host.py",
		"stubvisor/execute.py",
		"stubvisor/responses.py",
		"stubvisor/lifecycle.py",
		"stubvisor/bls.py",
		"stubvisor/common.py",
		"stubvisor/fields.py",
		"stubvisor/ipc.py",
		"stubvisor/loader.py",
	}
	for _, name := range want {
		got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			t.Fatalf("extracted tree lacks %s: %v", name, err)
		}
		embedded, err := fs.ReadFile(FS(), name)
		if err != nil {
			t.Fatalf("embedded FS lacks %s: %v", name, err)
		}
		if !bytes.Equal(got, embedded) {
			t.Errorf("%s: extracted bytes differ from the embedded ones", name)
		}
	}
}

func TestExtractReuse(t *testing.T) {
	tests := []struct {
		name string
		// prepare runs against the parent directory before the second Extract.
		prepare func(t *testing.T, parent, first string)
	}{
		{"same directory again", func(*testing.T, string, string) {}},
		{"existing tree is not rewritten", func(t *testing.T, _, first string) {
			// A marker file survives: the tree is reused as is.
			if err := os.WriteFile(filepath.Join(first, "marker"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			first, err := Extract(parent)
			if err != nil {
				t.Fatal(err)
			}
			tc.prepare(t, parent, first)
			second, err := Extract(parent)
			if err != nil {
				t.Fatal(err)
			}
			if first != second {
				t.Fatalf("second Extract returned %s, first %s", second, first)
			}
			if _, err := os.Stat(filepath.Join(first, "marker")); tc.name == "existing tree is not rewritten" && err != nil {
				t.Fatalf("tree was rewritten: %v", err)
			}
			onlyTree(t, parent)
		})
	}
}

func TestExtractConcurrent(t *testing.T) {
	parent := t.TempDir()
	const n = 8
	dirs := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dirs[i], errs[i] = Extract(parent)
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if dirs[i] != dirs[0] {
			t.Fatalf("Extract %d returned %s, Extract 0 %s", i, dirs[i], dirs[0])
		}
	}
	onlyTree(t, parent)
}

// onlyTree fails the test unless parent holds one entry, the extracted
// tree: no temporary leftovers.
func onlyTree(t *testing.T, parent string) {
	t.Helper()
	entries, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("parent holds %d entries, want only the extracted tree", len(entries))
	}
}

func TestExtractBadParent(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Extract(filepath.Join(file, "sub"))
	if !errors.Is(err, ErrExtract) {
		t.Fatalf("Extract under a regular file: %v, want an ErrExtract", err)
	}
}
