package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// toy is a package whose tests leave known mutants alive: Add is tested
// only with b = 0 (a+b = a-b), Pos never at 0 (> and >= agree), Uncalled
// never.
var toy = map[string]string{
	"go.mod": "module toy\n\ngo 1.22\n",
	"toy.go": `package toy

func Add(a, b int) int { return a + b }

func Scale(x float64) float64 { return -x * 2 }

func Pos(x int) bool { return x > 0 }

func Twice(n int) int {
	c := 0
	c++
	return c * n * 2
}

func Uncalled(x int) int { return x + 1 }

const k = 2 + 3 // constant: not mutated
`,
	"toy_test.go": `package toy

import "testing"

func TestAdd(t *testing.T) {
	if Add(2, 0) != 2 {
		t.Fatal("Add")
	}
}

func TestScale(t *testing.T) {
	if Scale(1) != -2 {
		t.Fatal("Scale")
	}
}

func TestPos(t *testing.T) {
	if !Pos(5) || Pos(-5) {
		t.Fatal("Pos")
	}
}

func TestTwice(t *testing.T) {
	if Twice(3) != 6 {
		t.Fatal("Twice")
	}
}
`,
}

// TestToyStatuses runs the tool on toy and checks every mutant's status
// against what toy's tests can and cannot see.
func TestToyStatuses(t *testing.T) {
	dir := t.TempDir()
	for name, src := range toy {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := t.TempDir()
	if err := runPackage(context.Background(), dir, nil, out, 2, 3, nil); err != nil {
		t.Fatal(err)
	}
	rep := readReport(t, filepath.Join(out, "toy.json"))
	want := map[string]string{
		"toy.go:3:35 ARITHMETIC_BASE +->-":        statusLived,
		"toy.go:5:40 INVERT_NEGATIVES -->+":       statusKilled,
		"toy.go:5:43 ARITHMETIC_BASE *->/":        statusKilled,
		"toy.go:7:33 CONDITIONALS_BOUNDARY >->>=": statusLived,
		"toy.go:7:33 CONDITIONALS_NEGATION >-><=": statusKilled,
		"toy.go:11:2 INCREMENT_DECREMENT ++->--":  statusKilled,
		"toy.go:12:11 ARITHMETIC_BASE *->/":       statusKilled,
		"toy.go:12:15 ARITHMETIC_BASE *->/":       statusKilled,
		"toy.go:15:37 ARITHMETIC_BASE +->-":       statusNotCovered,
	}
	got := map[string]string{}
	for _, m := range rep.Detail {
		got[m.Key()] = m.Status
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %q, want %q", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d mutants, want %d: %v", len(got), len(want), got)
	}
	if rep.KillRate != 75 { // 6 of 8 covered
		t.Errorf("kill rate %.2f, want 6/8", rep.KillRate)
	}
}

// TestTriageCountsEquivalent: a triaged survivor counts as killed; a
// triage line without a reason is refused, naming the file and line.
func TestTriageCountsEquivalent(t *testing.T) {
	dir := t.TempDir()
	muts := []*Mutant{
		{File: "a.go", Line: 1, Col: 2, Operator: opArithmetic, From: "+", To: "-", Status: statusLived},
		{File: "a.go", Line: 3, Col: 4, Operator: opArithmetic, From: "*", To: "/", Status: statusKilled},
	}
	triage := filepath.Join(dir, "p.txt")
	if err := os.WriteFile(triage, []byte("# reasons\na.go:1:2 ARITHMETIC_BASE +->-\tadds zero\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := newReport("p", muts, dir)
	if err != nil {
		t.Fatal(err)
	}
	if r.Equivalent != 1 || r.Lived != 0 || r.KillRate != 100 {
		t.Errorf("equivalent %d lived %d rate %.1f, want 1 0 100", r.Equivalent, r.Lived, r.KillRate)
	}
	if err := os.WriteFile(triage, []byte("a.go:1:2 ARITHMETIC_BASE +->-\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := newReport("p", muts, dir); err == nil {
		t.Error("a triage line without a reason was accepted")
	}
}

func readReport(t *testing.T, path string) *Report {
	t.Helper()
	r, err := readReportFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestExtraTests: a package's users' tests (-tests) run against its
// mutants too: user's test sees Add(2, 3), which kills a+b → a-b.
func TestExtraTests(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"user/user.go":      "package user\n",
		"user/user_test.go": "package user\n\nimport (\n\t\"testing\"\n\t\"toy\"\n)\n\nfunc TestUsesAdd(t *testing.T) {\n\tif toy.Add(2, 3) != 5 {\n\t\tt.Fatal(\"Add\")\n\t}\n}\n",
	}
	for name, src := range toy {
		files[name] = src
	}
	for name, src := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := t.TempDir()
	if err := runPackage(context.Background(), dir, []string{filepath.Join(dir, "user")}, out, 2, 3, nil); err != nil {
		t.Fatal(err)
	}
	for _, m := range readReport(t, filepath.Join(out, "toy.json")).Detail {
		if m.Key() == "toy.go:3:35 ARITHMETIC_BASE +->-" && (m.Status != statusKilled || len(m.Tests) != 2) {
			t.Errorf("%s: %s by %v, want KILLED by TestAdd and user.TestUsesAdd", m.Key(), m.Status, m.Tests)
		}
	}
}
