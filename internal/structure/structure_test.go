// Package structure holds repository-wide structure checks: no function
// outside tests longer than 80 lines, no function in cmd/pfedmma longer than
// 60, and cmd/pfedmma at most 1,200 non-test lines (issue 37).
package structure

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const (
	maxFuncLines    = 80   // any function outside tests
	maxCmdFuncLines = 60   // any function in cmd/pfedmma
	maxCmdLines     = 1200 // cmd/pfedmma's non-test lines
	cmdDir          = "cmd/pfedmma"
)

// funcSize is one function or method of a non-test file and its length in
// lines, from the line of "func" to the line of the closing brace.
type funcSize struct {
	file  string // slash path relative to the repository root
	name  string // Recv.Name or Name
	lines int
}

// repoRoot is the module root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root %s: %v", root, err)
	}
	return root
}

// nonTestGoFiles lists the repository's .go files that are not tests,
// skipping hidden folders, testdata and vendored trees.
func nonTestGoFiles(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") ||
				name == "testdata" || name == "vendor" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			files = append(files, path)
		}
		return nil
	})
	return files, err
}

// funcName is "Recv.Name" for a method and "Name" for a function.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	for {
		switch x := typ.(type) {
		case *ast.StarExpr:
			typ = x.X
			continue
		case *ast.IndexExpr:
			typ = x.X
			continue
		case *ast.IndexListExpr:
			typ = x.X
			continue
		case *ast.Ident:
			return x.Name + "." + fd.Name.Name
		}
		return fd.Name.Name
	}
}

// funcSizes parses one file and returns the length of each function
// declaration with a body, and the file's line count.
func funcSizes(root, path string) ([]funcSize, int, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, 0, fmt.Errorf("parse %s: %w", path, err)
	}
	rel, err := filepath.Rel(root, path)
	if err != nil {
		return nil, 0, err
	}
	var out []funcSize
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
		out = append(out, funcSize{file: filepath.ToSlash(rel), name: funcName(fd), lines: n})
	}
	return out, bytes.Count(src, []byte("\n")), nil
}

// finding is one function over its limit (or cmd/pfedmma over its line
// budget, name "" and lines the package's).
type finding struct {
	key   string // "file: Func", or cmdDir
	lines int
	limit int
}

func (f finding) String() string {
	return fmt.Sprintf("%s is %d lines (limit %d)", f.key, f.lines, f.limit)
}

// findings returns, sorted, each function over its limit and cmd/pfedmma
// when over its line budget.
func findings(root string) ([]finding, error) {
	files, err := nonTestGoFiles(root)
	if err != nil {
		return nil, err
	}
	var bad []finding
	cmdLines := 0
	for _, path := range files {
		sizes, lines, err := funcSizes(root, path)
		if err != nil {
			return nil, err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return nil, err
		}
		inCmd := filepath.ToSlash(filepath.Dir(rel)) == cmdDir
		if inCmd {
			cmdLines += lines
		}
		for _, s := range sizes {
			limit := maxFuncLines
			if inCmd {
				limit = maxCmdFuncLines
			}
			if s.lines > limit {
				bad = append(bad, finding{key: s.file + ": " + s.name, lines: s.lines, limit: limit})
			}
		}
	}
	sort.Slice(bad, func(i, j int) bool { return bad[i].key < bad[j].key })
	if cmdLines > maxCmdLines {
		bad = append(bad, finding{key: cmdDir, lines: cmdLines, limit: maxCmdLines})
	}
	return bad, nil
}

// TestFunctionAndCommandSizes fails naming every function outside tests over
// 80 lines, every function in cmd/pfedmma over 60 and cmd/pfedmma over 1,200
// non-test lines — except those listed in pending at their listed size. It
// also fails when a pending one grew, or was split (then its line here goes),
// so the list only shrinks.
func TestFunctionAndCommandSizes(t *testing.T) {
	bad, err := findings(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range bad {
		seen[f.key] = true
		was, ok := pending[f.key]
		switch {
		case !ok:
			t.Errorf("%s", f)
		case f.lines > was:
			t.Errorf("%s: it grew from %d lines while waiting to be split", f, was)
		}
	}
	for key := range pending {
		if !seen[key] {
			t.Errorf("%s is within its limit now: remove it from pending", key)
		}
	}
	t.Logf("%d functions (or packages) over their limit still pending (issue 37)", len(pending))
}

// pending are the findings issue 37's splitting has not reached yet, at
// their size when listed: numerical kernels and method builders, the
// fixture replays (methods/*/fixture.go, parity/step.go: they leave with
// the parity package).
var pending = map[string]int{
	"methods/adapt/fixture.go: Method.Step":            102,
	"methods/fedmvp/method.go: Method.Step":            83,
	"methods/pfedmoap/fixture.go: Method.FixtureRound": 139,
	"methods/pfedmoap/fixture.go: RoundFromFile":       100,
}
