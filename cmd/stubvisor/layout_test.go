package main

// Checks of the tree's shape that would otherwise be counted by hand: the
// import arrows docs/architecture.md allows, file and function sizes, and
// the file and lock lists of the package docs that keep them.

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/stubvisor/stubvisor"

// repoRoot is the module's root, seen from this package's directory.
var repoRoot = filepath.Join("..", "..")

// allowedArrows reads the import arrows docs/architecture.md allows: the
// lines "from -> to, to..." of its block between the "allowed imports"
// markers, paths relative to the module.
func allowedArrows(t *testing.T) map[string][]string {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	arrows := map[string][]string{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "<!-- allowed imports: begin -->":
			in = true
		case line == "<!-- allowed imports: end -->":
			in = false
		case in && strings.Contains(line, "->"):
			from, to, _ := strings.Cut(line, "->")
			from = strings.TrimSpace(from)
			for _, p := range strings.Split(to, ",") {
				if p = strings.TrimSpace(p); p != "" && p != "(nothing)" {
					arrows[from] = append(arrows[from], p)
				}
			}
			if _, ok := arrows[from]; !ok {
				arrows[from] = nil
			}
		}
	}
	if len(arrows) == 0 {
		t.Fatal("docs/architecture.md lists no allowed imports")
	}
	return arrows
}

// TestImportArrows fails on an import between the module's packages that
// docs/architecture.md does not allow (tests' own imports aside), and on a
// cycle in the allowed list: dependencies point one way.
func TestImportArrows(t *testing.T) {
	allowed := allowedArrows(t)
	list := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	list.Dir = repoRoot
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	rel := func(p string) string { return strings.TrimPrefix(strings.TrimPrefix(p, module), "/") }
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		from := rel(fields[0])
		if from == "" {
			continue // this test's own (test-only) package
		}
		to, listed := allowed[from]
		if !listed {
			t.Errorf("package %s is missing from the allowed imports of docs/architecture.md", from)
			continue
		}
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			if !slices.Contains(to, rel(imp)) {
				t.Errorf("%s imports %s: not an allowed arrow (docs/architecture.md)", from, rel(imp))
			}
		}
	}
	// The allowed arrows themselves form no cycle.
	state := map[string]int{} // 1: on the path, 2: done
	var visit func(p string, path []string)
	visit = func(p string, path []string) {
		switch state[p] {
		case 1:
			t.Errorf("allowed imports form a cycle: %s", strings.Join(append(path, p), " -> "))
			return
		case 2:
			return
		}
		state[p] = 1
		for _, q := range allowed[p] {
			visit(q, append(path, p))
		}
		state[p] = 2
	}
	for p := range allowed {
		visit(p, nil)
	}
}

// goFiles lists the module's Go files, generated ones left out.
func goFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != repoRoot && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if !regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`).Match(b) {
				files = append(files, path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestSizes: no Go file over 600 lines, no function outside tests over
// 100 (generated code aside).
func TestSizes(t *testing.T) {
	const maxFile, maxFunc = 600, 100
	fset := token.NewFileSet()
	for _, path := range goFiles(t) {
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if n := fset.File(f.Pos()).LineCount(); n > maxFile {
			t.Errorf("%s: %d lines, more than %d", path, n, maxFile)
		}
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Body != nil {
				n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
				if n > maxFunc {
					t.Errorf("%s: func %s is %d lines, more than %d", path, fn.Name.Name, n, maxFunc)
				}
			}
		}
	}
}

// TestPackageDocs: a package doc with a "# Files" section names every
// file of its package, and one with a "# Lock order" section names every
// mutex (Type.field, or the variable), so the lists stay true.
func TestPackageDocs(t *testing.T) {
	docs := 0
	for _, path := range goFiles(t) {
		if filepath.Base(path) != "doc.go" {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		doc := string(b)
		dir := filepath.Dir(path)
		if strings.Contains(doc, "// # Files") {
			docs++
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if n := e.Name(); strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") && !strings.Contains(doc, n) {
					t.Errorf("%s does not list %s", path, n)
				}
			}
		}
		if strings.Contains(doc, "// # Lock order") {
			for _, lock := range mutexes(t, dir) {
				if !regexp.MustCompile(`\b` + regexp.QuoteMeta(lock) + `\b`).MatchString(doc) {
					t.Errorf("%s does not list the lock %s", path, lock)
				}
			}
		}
	}
	if docs == 0 {
		t.Fatal("no package doc has a # Files section")
	}
}

// mutexes names the sync.Mutex and sync.RWMutex of the package in dir:
// Type.field for a field, Type for an embedded one, the name of a
// package variable.
func mutexes(t *testing.T, dir string) []string {
	t.Helper()
	isMutex := func(e ast.Expr) bool {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		pkg, ok := sel.X.(*ast.Ident)
		return ok && pkg.Name == "sync" && (sel.Sel.Name == "Mutex" || sel.Sel.Name == "RWMutex")
	}
	var out []string
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			for _, d := range f.Decls {
				gd, ok := d.(*ast.GenDecl)
				if !ok {
					continue
				}
				for _, spec := range gd.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						st, ok := spec.Type.(*ast.StructType)
						if !ok {
							continue
						}
						for _, field := range st.Fields.List {
							if !isMutex(field.Type) {
								continue
							}
							if len(field.Names) == 0 {
								out = append(out, spec.Name.Name)
							}
							for _, name := range field.Names {
								out = append(out, spec.Name.Name+"."+name.Name)
							}
						}
					case *ast.ValueSpec:
						if spec.Type != nil && isMutex(spec.Type) {
							for _, name := range spec.Names {
								out = append(out, name.Name)
							}
						}
					}
				}
			}
		}
	}
	return out
}
