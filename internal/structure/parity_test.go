package structure

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// parityImport is the reference-parity package: production code of a
// method imports it only to implement fixture hooks.
const parityImport = "github.com/pfedmma/pfedmma/parity"

// fixtureHooks are the method names of the fixture hooks (parity.Stepper,
// parity.Settings, parity.Rounder) and of the per-method replays.
var fixtureHooks = []string{"SettingsFrom", "FixtureKeys", "FixtureRound", "StepFromFile", "RoundFromFile"}

// parityLeak is why a production file of methods/ or prompt/ holds
// reference parity ("" when it does not): it is named fixture.go, imports
// the parity package, or declares a fixture hook or replay.
func parityLeak(path string, f *ast.File) string {
	if filepath.Base(path) == "fixture.go" {
		return "a file named fixture.go"
	}
	for _, im := range f.Imports {
		if p, err := strconv.Unquote(im.Path.Value); err == nil && (p == parityImport || strings.HasPrefix(p, parityImport+"/")) {
			return "imports " + p
		}
	}
	for _, decl := range f.Decls {
		if fd, ok := decl.(*ast.FuncDecl); ok && (slices.Contains(fixtureHooks, fd.Name.Name) || strings.HasPrefix(fd.Name.Name, "Replay")) {
			return "declares " + funcName(fd)
		}
		if gd, ok := decl.(*ast.GenDecl); ok {
			for _, sp := range gd.Specs {
				if ts, ok := sp.(*ast.TypeSpec); ok && strings.HasPrefix(ts.Name.Name, "Replay") {
					return "declares type " + ts.Name.Name
				}
			}
		}
	}
	return ""
}

// parityLeaks returns "file: why" for every production file of methods/
// and prompt/ that holds reference parity (parityLeak), sorted by file.
func parityLeaks(root string) (map[string]string, error) {
	files, err := nonTestGoFiles(root)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, path := range files {
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return nil, err
		}
		rel = filepath.ToSlash(rel)
		if !strings.HasPrefix(rel, "methods/") && !strings.HasPrefix(rel, "prompt/") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		if why := parityLeak(rel, f); why != "" {
			out[rel] = why
		}
	}
	return out, nil
}

// TestNoFixtureInMethods fails naming every production file of a method
// package (methods/…) or of prompt/ that holds reference parity — named
// fixture.go, importing the parity package, or declaring a fixture hook
// (SettingsFrom, FixtureKeys, FixtureRound) or a replay (StepFromFile,
// RoundFromFile, Replay…): what differs per method is data in parity or
// lives in the method's _test.go (issue 37). The files in parityPending are
// let through; one of them that holds no parity any more fails too, so the
// list only shrinks.
func TestNoFixtureInMethods(t *testing.T) {
	leaks, err := parityLeaks(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range slices.Sorted(maps.Keys(leaks)) {
		if !parityPending[file] {
			t.Errorf("%s holds reference parity (%s): move it to package parity (data) or the method's _test.go", file, leaks[file])
		}
	}
	for _, file := range slices.Sorted(maps.Keys(parityPending)) {
		if _, ok := leaks[file]; !ok {
			t.Errorf("%s holds no reference parity now: remove it from parityPending", file)
		}
	}
	t.Logf("%d production files of methods/ and prompt/ still hold reference parity (issue 37)", len(parityPending))
}

// parityPending are the production files issue 37's parity move has not
// reached yet.
var parityPending = map[string]bool{
	"methods/adapt/fixture.go":       true,
	"methods/client/fixture.go":      true,
	"methods/clipadapter/fixture.go": true,
	"methods/cocoop/fixture.go":      true,
	"methods/dpfpl/fixture.go":       true,
	"methods/fedclip/fixture.go":     true,
	"methods/fedmvp/method.go":       true,
	"methods/fedot/fixture.go":       true,
	"methods/fedotp/fixture.go":      true,
	"methods/fedpgp/fixture.go":      true,
	"methods/fedpha/fixture.go":      true,
	"methods/fedtpg/fixture.go":      true,
	"methods/kgcoop/fixture.go":      true,
	"methods/maple/fixture.go":       true,
	"methods/pfedmma/fixture.go":     true,
	"methods/pfedmoap/fixture.go":    true,
	"methods/plot/fixture.go":        true,
	"methods/prograd/fixture.go":     true,
	"methods/promptfl/fixture.go":    true,
	"methods/promptfolio/fixture.go": true,
	"methods/promptsrc/fixture.go":   true,
	"prompt/fixture.go":              true,
}
