package docsgen

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestNoHandWrittenNumbers scans the hand-written docs (ScanDocs: README.md,
// docs/*.md, docs/**/README.md, methods/*/README.md) and fails on every
// measured number outside a generated block or row, by the rule of
// HandNumbers, naming the file, the line and the number.
func TestNoHandWrittenNumbers(t *testing.T) {
	files, err := ScanDocs("../..")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := RenderRows("../../docs")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range HandNumbers(files, rows) {
		t.Error(h)
	}
}

// TestHandNumberRule holds the rule to examples written out by hand: each
// measured text must give exactly the numbers listed, each allowed one none.
func TestHandNumberRule(t *testing.T) {
	measured := []struct{ text, want string }{
		{"Local 74.22 on the world job", "74.22"},
		{"it reaches 74.2% on Base", "74.2%"},
		{"a ratio of 11.5× the authors'", "11.5×"},
		{"took 12 s a round", "12 s"},
		{"runs 3.2 images/s", "3.2 images/s"},
		{"GEMM at 202 GFLOP/s", "202 GFLOP/s"},
		{"peak RSS 2834 MiB", "2834 MiB"},
		{"the model is 6.8 MB", "6.8 MB"},
		{"```\nzeroshot  63.12\n```", "63.12"},
		{"`pfedmma run --preset world-lodo` (5.4 min on the machine", "5.4 min"},
		{"avg 97.17/77.40", "97.17 77.40"},
		{"<!-- paper: pFedMMA -->97.17<!-- /paper -->", "97.17"},
		{"the same 3.4 points\n", "3.4 points"},
	}
	for _, c := range measured {
		got := numbersOf(c.text)
		if got != c.want {
			t.Errorf("%q: measured numbers %q, want %q", c.text, got, c.want)
		}
	}
	allowed := []string{
		"<!-- generated:fig-x (make docs; from a.json k) -->74.22<!-- /generated:fig-x -->",
		"`--set optimizer.lr=0.05`", "`fedot.lr` 0.01", "```sh\npfedmma run --scale 0.25\n```",
		"<!-- paper: pFedMMA, Table 1 -->97.17/77.40<!-- /paper -->",
		"lr 0.005, ε 0.4, Dir(0.5), 50% participation, ratio 0.2–0.6, weight decay 1e-2",
		"stays within 1e-4 of it; kill rate ≥ 85%", "torch 1.13.1, Go 1.24, TLS 1.3, v0.6.0",
		"2026-11-29 05:39–05:47 UTC", "224×224 images, 32×32 projections", "Table 1, §3.2, issue 39",
		"10 clients, 5 rounds, 16 shots", "docs/sitting/3/gemm.txt and ViT-B/16", "<!-- 74.22 -->",
		"[the run](docs/run-0.5/summary.json)",
	}
	for _, a := range allowed {
		if got := numbersOf(a); got != "" {
			t.Errorf("%q: measured numbers %q, want none", a, got)
		}
	}
}

func numbersOf(text string) string {
	var ns []string
	for _, h := range HandNumbers([]File{{Path: "x.md", Text: text}}, nil) {
		ns = append(ns, h.Number)
	}
	return strings.Join(ns, " ")
}

// TestHandNumberInDocsDetected writes a number by hand into the real
// docs/performance.md and a generated row's number into a plain line, and
// expects the scan to name the file, the line and the number.
func TestHandNumberInDocsDetected(t *testing.T) {
	files, err := ScanDocs("../..")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := RenderRows("../../docs")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(files, func(f File) bool { return strings.HasSuffix(f.Path, "docs/performance.md") })
	if i < 0 {
		t.Fatal("docs/performance.md not scanned")
	}
	line := strings.Count(files[i].Text, "\n") + 1
	files[i].Text += "A later run trained at 24.84 images/s.\n"
	got := HandNumbers(files, rows)
	if len(got) != 1 || got[0].Line != line || got[0].Number != "24.84 images/s" || !strings.HasSuffix(got[0].Path, "docs/performance.md") {
		t.Errorf("HandNumbers after a hand-written rate = %v, want docs/performance.md:%d 24.84 images/s", got, line)
	}
	if s := got[0].String(); !strings.Contains(s, "performance.md:") || !strings.Contains(s, "24.84") {
		t.Errorf("the finding %q does not name the file, line and number", s)
	}
}

// TestScanDocsRefusesUnknownMarkdown: markdown under docs/ that is neither a
// page, a README.md nor a tool's output is an error naming it, so no
// hand-written page escapes the scan.
func TestScanDocsRefusesUnknownMarkdown(t *testing.T) {
	root := t.TempDir()
	for p, text := range map[string]string{
		"README.md": "r", "docs/a.md": "a", "docs/x/README.md": "x", "docs/x/y/report.md": "74.22", "docs/x/notes.md": "n",
	} {
		path := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ScanDocs(root); err == nil || !strings.Contains(err.Error(), "notes.md") {
		t.Fatalf("ScanDocs with docs/x/notes.md: err = %v, want one naming it", err)
	}
	if err := os.Remove(filepath.Join(root, "docs", "x", "notes.md")); err != nil {
		t.Fatal(err)
	}
	files, err := ScanDocs(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		rel, _ := filepath.Rel(root, f.Path)
		names = append(names, filepath.ToSlash(rel))
	}
	if want := []string{"README.md", "docs/a.md", "docs/x/README.md"}; !slices.Equal(names, want) {
		t.Errorf("ScanDocs = %q, want %q (report.md is evidence)", names, want)
	}
}
