package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
)

// schemata is a package's test binary with every mutant compiled in.
type schemata struct {
	pkg      *pkgSource
	mutants  []*Mutant
	files    []*rewriter
	bins     []*testBinary // the package's own tests first, then -tests'
	extra    []string      // folders of the other packages whose tests run too
	work     string
	overlay  string
	excluded *regexp.Regexp
}

// newSchemata finds the package's mutants (files matching exclude are left
// alone) and prepares the rewriters.
func newSchemata(p *pkgSource, work string, exclude *regexp.Regexp) *schemata {
	s := &schemata{pkg: p, work: work, excluded: exclude}
	for i, f := range p.files {
		rel, _ := filepath.Rel(repoRoot(p.dir), p.paths[i])
		if exclude != nil && exclude.MatchString(filepath.ToSlash(rel)) {
			continue
		}
		src, err := os.ReadFile(p.paths[i])
		if err != nil {
			continue
		}
		sites := findSites(p.fset, f, p.info, rel, &s.mutants)
		if len(sites) == 0 {
			continue
		}
		tf := p.fset.File(f.Pos())
		s.files = append(s.files, &rewriter{fset: p.fset, src: src, base: tf.Base(), sites: sites, disabled: map[int]bool{}})
	}
	return s
}

// testBinary is one package's test binary built with the schemata in
// place of the mutated package.
type testBinary struct {
	dir, bin string
}

// compileErr matches a compiler error's file and line.
var compileErr = regexp.MustCompile(`(?m)^(?:\./)?([^\s:]+\.go):(\d+):\d+: `)

// build compiles the schemata binary. A mutant whose helper call does not
// compile (an operand Go cannot pass to the helper) is marked NOT VIABLE and
// left out; the build is retried without it.
func (s *schemata) build(ctx context.Context) error {
	for attempt := 0; attempt < 50; attempt++ {
		if err := s.writeOverlay(); err != nil {
			return err
		}
		own, out, err := s.compile(ctx, s.pkg.dir, 0)
		if err == nil {
			s.bins = nil
			if _, err := os.Stat(own.bin); err == nil { // a package without tests builds no binary
				s.bins = append(s.bins, own)
			}
			return s.buildExtra(ctx)
		}
		if !s.disableFailing(out) {
			return fmt.Errorf("building the schemata of %s: %s", s.pkg.importPath, out)
		}
	}
	return fmt.Errorf("building the schemata of %s: too many mutants fail to compile", s.pkg.importPath)
}

// compile builds the test binary of the package in dir with the overlay.
func (s *schemata) compile(ctx context.Context, dir string, i int) (*testBinary, string, error) {
	b := &testBinary{dir: dir, bin: filepath.Join(s.work, fmt.Sprintf("schemata%d.test", i))}
	cmd := exec.CommandContext(ctx, "go", "test", "-c", "-trimpath", "-overlay", s.overlay, "-o", b.bin, ".")
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return b, out.String(), err
}

// buildExtra builds the test binaries of the other packages whose tests
// run against the mutants (-tests): a package's code is also checked by the
// tests of the packages that use it.
func (s *schemata) buildExtra(ctx context.Context) error {
	for i, dir := range s.extra {
		b, out, err := s.compile(ctx, dir, i+1)
		if err != nil {
			return fmt.Errorf("building the tests of %s with the schemata of %s: %s", dir, s.pkg.importPath, out)
		}
		if _, err := os.Stat(b.bin); err == nil { // a package without tests builds no binary
			s.bins = append(s.bins, b)
		}
	}
	return nil
}

// writeOverlay renders every file into the work folder and writes the
// overlay that puts them (and the helpers) in place of the package's files.
func (s *schemata) writeOverlay() error {
	repl := map[string]string{}
	for i, r := range s.files {
		path := filepath.Join(s.work, fmt.Sprintf("f%d.go", i))
		if err := os.WriteFile(path, []byte(r.render()), 0o644); err != nil {
			return err
		}
		repl[s.pathOf(r)] = path
	}
	helpers := filepath.Join(s.work, "helpers.go")
	if err := os.WriteFile(helpers, []byte(helpersSource(s.pkg.name, len(s.mutants)+1)), 0o644); err != nil {
		return err
	}
	repl[filepath.Join(s.pkg.dir, "zz_pfedmma_mutants.go")] = helpers
	b, err := json.Marshal(map[string]any{"Replace": repl})
	if err != nil {
		return err
	}
	s.overlay = filepath.Join(s.work, "overlay.json")
	return os.WriteFile(s.overlay, b, 0o644)
}

// pathOf is the absolute source path of a rewriter's file.
func (s *schemata) pathOf(r *rewriter) string {
	for i, f := range s.pkg.files {
		if s.pkg.fset.File(f.Pos()).Base() == r.base {
			return s.pkg.paths[i]
		}
	}
	return ""
}

// disableFailing marks NOT VIABLE the mutants on the lines the compiler
// blames; it reports whether it found any.
func (s *schemata) disableFailing(out string) bool {
	found := false
	for _, m := range compileErr.FindAllStringSubmatch(out, -1) {
		line, _ := strconv.Atoi(m[2])
		for _, r := range s.files {
			if filepath.Base(s.pathOf(r)) != filepath.Base(m[1]) {
				continue
			}
			for _, id := range r.sitesOnLines(map[int]bool{line: true}) {
				r.disabled[id] = true
				s.mutants[id].Status = statusNotViable
				found = true
			}
		}
	}
	return found
}

// repoRoot is the folder holding go.mod above dir (for relative names).
func repoRoot(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}
