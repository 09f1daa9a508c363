package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// listed is the part of `go list -json` a package load needs.
type listed struct {
	Dir        string
	ImportPath string
	Name       string
	GoFiles    []string
	Export     string
}

// pkgSource is one package's parsed, type-checked non-test files.
type pkgSource struct {
	dir, importPath, name string
	fset                  *token.FileSet
	files                 []*ast.File
	paths                 []string // absolute, parallel to files
	info                  *types.Info
}

// load parses and type-checks the package in dir, importing its
// dependencies from the export data `go list -export` builds.
func load(dir string) (*pkgSource, error) {
	cmd := exec.Command("go", "list", "-export", "-deps", "-json", ".")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list in %s: %w: %s", dir, err, stderr.String())
	}
	exports := map[string]string{}
	var target listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("go list in %s: %w", dir, err)
		}
		exports[p.ImportPath] = p.Export
		target = p // the package itself comes last
	}
	p := &pkgSource{dir: target.Dir, importPath: target.ImportPath, name: target.Name, fset: token.NewFileSet()}
	for _, name := range target.GoFiles {
		path := filepath.Join(target.Dir, name)
		f, err := parser.ParseFile(p.fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		p.files = append(p.files, f)
		p.paths = append(p.paths, path)
	}
	lookup := func(path string) (io.ReadCloser, error) {
		e, ok := exports[path]
		if !ok || e == "" {
			return nil, fmt.Errorf("no export data for %q", path)
		}
		return os.Open(e)
	}
	conf := types.Config{Importer: importer.ForCompiler(p.fset, "gc", lookup)}
	p.info = &types.Info{Types: map[ast.Expr]types.TypeAndValue{}}
	if _, err := conf.Check(target.ImportPath, p.fset, p.files, p.info); err != nil {
		return nil, fmt.Errorf("type-checking %s: %w", target.ImportPath, err)
	}
	return p, nil
}

// operands returns the operand expressions a site's helper call takes.
func operands(s *site) (x, y ast.Expr) {
	switch n := s.node.(type) {
	case *ast.BinaryExpr:
		return n.X, n.Y
	case *ast.IncDecStmt:
		return n.X, nil
	case *ast.UnaryExpr:
		return n.X, nil
	}
	return nil, nil
}
