package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Statuses, as go-gremlins names them.
const (
	statusKilled     = "KILLED"
	statusLived      = "LIVED"
	statusTimedOut   = "TIMED OUT"
	statusNotCovered = "NOT COVERED"
	statusNotViable  = "NOT VIABLE"
	statusEquivalent = "EQUIVALENT" // LIVED, triaged as equivalent
)

// testRun is one top-level test of the package: how long it ran and which
// mutants' sites it reached, unmutated.
type testRun struct {
	bin     *testBinary
	name    string
	elapsed time.Duration
	reached map[int]bool
}

// listTests returns a binary's top-level tests (and examples, fuzz
// targets' seed corpora), as it lists them.
func listTests(ctx context.Context, b *testBinary) ([]string, error) {
	cmd := exec.CommandContext(ctx, b.bin, "-test.list", ".")
	cmd.Dir = b.dir
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("listing the tests of %s: %w", b.dir, err)
	}
	var names []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "Test") || strings.HasPrefix(l, "Example") || strings.HasPrefix(l, "Fuzz") {
			names = append(names, strings.TrimSpace(l))
		}
	}
	return names, nil
}

// trace runs every test of every binary alone, unmutated, recording its
// time and the sites it reaches; a test that fails unmutated stops the
// package.
func (s *schemata) trace(ctx context.Context) ([]testRun, error) {
	var runs []testRun
	for _, b := range s.bins {
		names, err := listTests(ctx, b)
		if err != nil {
			return nil, err
		}
		for _, name := range names {
			r, err := s.traceOne(ctx, b, name, len(runs))
			if err != nil {
				return nil, err
			}
			runs = append(runs, r)
		}
	}
	return runs, nil
}

// traceOne runs one test alone, unmutated.
func (s *schemata) traceOne(ctx context.Context, b *testBinary, name string, i int) (testRun, error) {
	file := filepath.Join(s.work, fmt.Sprintf("trace%d", i))
	start := time.Now()
	out, err := s.exec(ctx, b, 0, []string{"-test.run", "^" + regexp.QuoteMeta(name) + "$"}, "-1", file)
	if err != nil {
		return testRun{}, fmt.Errorf("%s: %s fails unmutated: %w\n%s", b.dir, name, err, out)
	}
	reached, err := readTrace(file)
	if err != nil {
		return testRun{}, err
	}
	return testRun{bin: b, name: name, elapsed: time.Since(start), reached: reached}, nil
}

// readTrace reads the mutant IDs a traced run reached.
func readTrace(path string) (map[int]bool, error) {
	reached := map[int]bool{}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return reached, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if id, err := strconv.Atoi(sc.Text()); err == nil {
			reached[id] = true
		}
	}
	return reached, sc.Err()
}

// exec runs the schemata binary in the package's folder with mutant active
// (and a trace file when trace is not empty), killing its process group
// after timeout (0: none).
func (s *schemata) exec(ctx context.Context, b *testBinary, timeout time.Duration, args []string, mutant, trace string) (string, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	pre := []string{"-test.count=1"}
	if testShort {
		pre = append(pre, "-test.short")
	}
	cmd := exec.CommandContext(ctx, b.bin, append(pre, args...)...)
	cmd.Dir = b.dir
	cmd.Env = append(os.Environ(), "PFEDMMA_MUTANT="+mutant, "PFEDMMA_MUTANT_TRACE="+trace)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	if ctx.Err() == context.DeadlineExceeded {
		return string(out), context.DeadlineExceeded
	}
	return string(out), err
}

// runMutants runs each covered mutant against the tests that reach its
// site, workers at a time, with -test.failfast; a mutant whose tests fail
// (or time out) is killed.
func (s *schemata) runMutants(ctx context.Context, runs []testRun, workers int, factor float64) {
	todo := make(chan *Mutant)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	total := 0
	for _, m := range s.mutants {
		if m.Status == "" {
			total++
		}
	}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range todo {
				s.runOne(ctx, m, runs, factor)
				mu.Lock()
				done++
				if done%25 == 0 || done == total {
					slog.Info("mutants", "package", s.pkg.importPath, "done", done, "of", total)
				}
				mu.Unlock()
			}
		}()
	}
	for _, m := range s.mutants {
		if m.Status == "" {
			todo <- m
		}
	}
	close(todo)
	wg.Wait()
}

// runOne sets m's status from the tests that reach it, binary by binary;
// it stops at the first failure.
func (s *schemata) runOne(ctx context.Context, m *Mutant, runs []testRun, factor float64) {
	m.Status = statusNotCovered
	for _, b := range s.bins {
		var reach []testRun
		for _, r := range runs {
			if r.bin == b && r.reached[m.ID] {
				reach = append(reach, r)
				m.Tests = append(m.Tests, s.testName(b, r.name))
			}
		}
		for _, group := range fastFirst(reach) {
			status, reason := s.runGroup(ctx, b, m, group, factor)
			m.Status, m.Reason = status, reason
			if status != statusLived {
				return
			}
		}
	}
}

// slowTest is the unmutated time above which a test runs alone, after the
// faster ones: a mutant is most often killed by a quick test, and a slow
// quality guard run first would cost every mutant its time.
const slowTest = 2 * time.Second

// fastFirst groups tests for running: the fast ones together, then each
// slow one alone, fastest first.
func fastFirst(reach []testRun) [][]testRun {
	sort.SliceStable(reach, func(i, j int) bool { return reach[i].elapsed < reach[j].elapsed })
	var groups [][]testRun
	var fast []testRun
	for _, r := range reach {
		if r.elapsed <= slowTest {
			fast = append(fast, r)
		} else {
			groups = append(groups, []testRun{r})
		}
	}
	if len(fast) > 0 {
		groups = append([][]testRun{fast}, groups...)
	}
	return groups
}

// runGroup runs one group of tests against mutant m.
func (s *schemata) runGroup(ctx context.Context, b *testBinary, m *Mutant, group []testRun, factor float64) (status, reason string) {
	var names []string
	var budget time.Duration
	for _, r := range group {
		names = append(names, regexp.QuoteMeta(r.name))
		budget += r.elapsed
	}
	timeout := time.Duration(factor*float64(budget)) + 10*time.Second
	args := []string{"-test.failfast", "-test.run", "^(" + strings.Join(names, "|") + ")$"}
	out, err := s.exec(ctx, b, timeout, args, strconv.Itoa(m.ID), "")
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return statusTimedOut, ""
	case err != nil:
		return statusKilled, firstFailure(out)
	}
	return statusLived, ""
}

// testName names a test in the report: bare for the package's own, with
// its package's folder for another's.
func (s *schemata) testName(b *testBinary, name string) string {
	if b.dir == s.pkg.dir {
		return name
	}
	rel, _ := filepath.Rel(repoRoot(b.dir), b.dir)
	return filepath.ToSlash(rel) + "." + name
}

// firstFailure is the first "--- FAIL" or panic line of a test output.
func firstFailure(out string) string {
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "--- FAIL") || strings.HasPrefix(l, "panic:") {
			return l
		}
	}
	return ""
}
