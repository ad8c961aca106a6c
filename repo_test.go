package cairn

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// goPackage is one directory of Go files as the parser sees it, test files
// left out.
type goPackage struct {
	dir   string
	fset  *token.FileSet
	files map[string]*ast.File
}

// skipDir reports directories that hold no Cairn packages: caches, build
// output, hidden folders and test data.
func skipDir(path string, d fs.DirEntry) bool {
	name := d.Name()
	if path == "." {
		return false
	}
	return strings.HasPrefix(name, ".") || name == "out" || name == "testdata" || name == "node_modules"
}

// walkGoFiles calls fn with the path of every Go file below root, tests
// included, in the directories skipDir keeps.
func walkGoFiles(root string, fn func(path string) error) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skipDir(path, d) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		return fn(path)
	})
}

// loadPackages parses every non-test Go file of the repository, keeping
// comments and build-tagged files alike.
func loadPackages(t *testing.T) []goPackage {
	t.Helper()
	fset := token.NewFileSet()
	byDir := map[string]map[string]*ast.File{}
	err := walkGoFiles(".", func(path string) error {
		if strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		if byDir[dir] == nil {
			byDir[dir] = map[string]*ast.File{}
		}
		byDir[dir][path] = f
		return nil
	})
	if err != nil {
		t.Fatalf("walking the repository: %v", err)
	}
	var pkgs []goPackage
	for dir, files := range byDir {
		pkgs = append(pkgs, goPackage{dir: dir, fset: fset, files: files})
	}
	if len(pkgs) == 0 {
		t.Fatal("found no Go packages: is the test running from the repository root?")
	}
	return pkgs
}

// TestPackagesHaveDocs fails for every package without a package comment:
// each package says what its one job is.
func TestPackagesHaveDocs(t *testing.T) {
	for _, p := range loadPackages(t) {
		documented := false
		for _, f := range p.files {
			if f.Doc != nil && strings.TrimSpace(f.Doc.Text()) != "" {
				documented = true
			}
		}
		if !documented {
			t.Errorf("package in %s has no package comment: say what its one job is", p.dir)
		}
	}
}

// TestImportDirection keeps pkg/ free of node/ and cmd/: the libraries are
// node-agnostic and must stay reusable.
func TestImportDirection(t *testing.T) {
	banned := []string{"cairn.dev/cairn/node", "cairn.dev/cairn/cmd", "cairn.dev/cairn/test"}
	for _, p := range loadPackages(t) {
		if !strings.HasPrefix(filepath.ToSlash(p.dir), "pkg/") && p.dir != "pkg" {
			continue
		}
		for path, f := range p.files {
			for _, imp := range f.Imports {
				target, _ := strconv.Unquote(imp.Path.Value)
				for _, b := range banned {
					if target == b || strings.HasPrefix(target, b+"/") {
						t.Errorf("%s imports %s: pkg/ must not depend on %s", path, target, b)
					}
				}
			}
		}
	}
}

// TestCommandsImportNoBuild keeps the image build out of the commands:
// build/ holds what makes an image (mkimage and its packages), and no
// package under cmd/, its tests included, imports it. What a command
// needs of it both ways (reading a unified kernel image) lives in pkg/.
func TestCommandsImportNoBuild(t *testing.T) {
	fset := token.NewFileSet()
	err := walkGoFiles("cmd", func(path string) error {
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			target, _ := strconv.Unquote(imp.Path.Value)
			if target == "cairn.dev/cairn/build" || strings.HasPrefix(target, "cairn.dev/cairn/build/") {
				t.Errorf("%s imports %s: cmd/ must not depend on build/", path, target)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walking cmd/: %v", err)
	}
}

// TestInitLinksNoTestCode keeps test code out of the node's PID 1: the
// production /init (CGO_ENABLED=0, no build tags) links no package that
// imports testing, as a test helper does. Test helpers live in packages
// of their own (pkg/supervisor/supervisortest,
// node/logstore/logstoretest) that only tests import.
func TestInitLinksNoTestCode(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool to list /init's packages with: %v", err)
	}
	cmd := exec.Command(goTool, "list", "-deps", "-f", `{{.ImportPath}}:{{range .Imports}} {{.}}{{end}}`, "./cmd/init")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/init: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 2 {
		t.Fatalf("go list -deps ./cmd/init listed %q, want /init and its packages", out)
	}
	for _, l := range lines {
		pkg, imports, _ := strings.Cut(l, ":")
		for _, imp := range strings.Fields(imports) {
			if imp == "testing" || strings.HasPrefix(imp, "testing/") {
				t.Errorf("/init links %s, which imports %s: move its test helpers to a package of their own", pkg, imp)
			}
		}
	}
}

// TestBannedImports lists dependencies Cairn does not use anywhere, each with
// the reason.
func TestBannedImports(t *testing.T) {
	banned := map[string]string{
		"io/ioutil":                  "deprecated: use io and os",
		"github.com/sirupsen/logrus": "log through logtree",
		"github.com/pkg/errors":      "wrap errors with fmt.Errorf and %w",
	}
	for _, p := range loadPackages(t) {
		for path, f := range p.files {
			for _, imp := range f.Imports {
				target, _ := strconv.Unquote(imp.Path.Value)
				if why, ok := banned[target]; ok {
					t.Errorf("%s imports %s: %s", path, target, why)
				}
			}
		}
	}
}

// TestNoBareGoroutinesInNodeCode keeps long-running work in node/ and cmd/
// under the supervisor, where it is restarted, logged and stopped; pkg/
// internals may start goroutines whose lifetime they document.
func TestNoBareGoroutinesInNodeCode(t *testing.T) {
	for _, p := range loadPackages(t) {
		dir := filepath.ToSlash(p.dir)
		if !strings.HasPrefix(dir, "node/") && !strings.HasPrefix(dir, "cmd/") {
			continue
		}
		for _, f := range p.files {
			ast.Inspect(f, func(n ast.Node) bool {
				if g, ok := n.(*ast.GoStmt); ok {
					t.Errorf("%s: bare go statement: run it under the supervisor instead", p.fset.Position(g.Pos()))
				}
				return true
			})
		}
	}
}
