// Command mutants runs mutation testing on Go packages by mutant schemata.
//
// go-gremlins (`make mutants-gremlins`) copies the module and rebuilds the
// package's test binary for every mutant: 18 s a mutant here (1,054 s for
// methods/kgcoop's 58), about ten CPU hours for the method packages'
// ~6,000. mutants compiles every mutant of a package into one test binary
// instead, each operation calling a helper that computes the original
// unless the process's PFEDMMA_MUTANT names one of its mutants; it then runs
// each mutant against only the tests that reach its site (traced once,
// unmutated), with -test.failfast. The mutators and the statuses are
// go-gremlins' defaults and names (ARITHMETIC_BASE, CONDITIONALS_BOUNDARY,
// CONDITIONALS_NEGATION, INCREMENT_DECREMENT, INVERT_NEGATIVES; KILLED,
// LIVED, TIMED OUT, NOT COVERED, NOT VIABLE), except that constant
// expressions are not mutated (Go may need them constant).
//
// A surviving mutant that cannot change behaviour is triaged as equivalent in
// the package's triage file (docs/mutation/triage/<package>.txt: one
// "key<TAB>reason" line per mutant, key as the report prints it) and counts
// as killed. The report: one JSON per package and docs/mutation/README.md's
// table.
//
// Usage:
//
//	go run ./tools/mutants [-workers 2] [-exclude regexp] ./methods/kgcoop ...
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
)

func main() {
	out := flag.String("out", "docs/mutation", "the folder of the JSON reports and the triage files (triage/)")
	workers := flag.Int("workers", 1, "mutants run at once")
	factor := flag.Float64("timeout-factor", 3, "a mutant's time limit: this times its tests' unmutated time, plus 10 s")
	exclude := flag.String("exclude", "", "regexp of files (relative to the module root) not to mutate")
	flag.BoolVar(&testShort, "short", false, "run the tests with -test.short (skips the world-job quality guards)")
	tests := flag.String("tests", "", "comma-separated folders of other packages whose tests also run against the mutants (a shared package's users)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var ex *regexp.Regexp
	if *exclude != "" {
		var err error
		if ex, err = regexp.Compile(*exclude); err != nil {
			fail(fmt.Errorf("-exclude: %w", err))
		}
	}
	for _, dir := range flag.Args() {
		if err := runPackage(ctx, dir, splitList(*tests), *out, *workers, *factor, ex); err != nil {
			fail(err)
		}
	}
	if err := writeTable(*out); err != nil {
		fail(err)
	}
}

// testShort passes -test.short to every test run.
var testShort bool

// splitList splits a comma-separated flag value, dropping empty parts.
func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func fail(err error) {
	slog.Error("mutants", "err", err)
	os.Exit(1)
}

// runPackage mutation-tests the package in dir and writes its report.
func runPackage(ctx context.Context, dir string, extra []string, out string, workers int, factor float64, exclude *regexp.Regexp) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	p, err := load(abs)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "mutants-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	s := newSchemata(p, work, exclude)
	for _, d := range extra {
		a, err := filepath.Abs(d)
		if err != nil {
			return err
		}
		s.extra = append(s.extra, a)
	}
	slog.Info("mutants", "package", p.importPath, "mutants", len(s.mutants))
	if err := s.build(ctx); err != nil {
		return err
	}
	runs, err := s.trace(ctx)
	if err != nil {
		return err
	}
	s.runMutants(ctx, runs, workers, factor)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	rep, err := newReport(p.importPath, s.mutants, filepath.Join(out, "triage"))
	if err != nil {
		return err
	}
	slog.Info("mutants", "package", p.importPath, "killed", rep.Killed, "equivalent", rep.Equivalent, "lived", rep.Lived,
		"not_covered", rep.NotCovered, "not_viable", rep.NotViable, "kill_rate", fmt.Sprintf("%.1f%%", rep.KillRate))
	return rep.write(out)
}
