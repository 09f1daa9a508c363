package report

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/pfedmma/pfedmma/eval"
)

// parseMarkdownTable returns the cells of the table rows of md (header
// first, separator dropped).
func parseMarkdownTable(t *testing.T, md string) [][]string {
	t.Helper()
	var rows [][]string
	for _, line := range strings.Split(md, "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		if strings.HasPrefix(line, "|:--") {
			continue
		}
		parts := strings.Split(strings.Trim(line, "|"), "|")
		for i := range parts {
			parts[i] = strings.TrimSpace(parts[i])
		}
		rows = append(rows, parts)
	}
	return rows
}

func TestMarkdownTable(t *testing.T) {
	s := paperSummary()
	md := s.Table("Average on 7 datasets").Markdown()
	rows := parseMarkdownTable(t, md)
	if want := []string{"Method", "Local", "Base", "Novel", "HM"}; strings.Join(rows[0], ",") != strings.Join(want, ",") {
		t.Errorf("header = %v, want %v", rows[0], want)
	}
	if len(rows) != 1+len(s.Methods) {
		t.Fatalf("%d rows, want %d:\n%s", len(rows)-1, len(s.Methods), md)
	}
	if !strings.HasPrefix(md, "**Average on 7 datasets**\n\n| Method |") {
		t.Errorf("title missing:\n%s", md)
	}
	// Best value per column, for the bold check.
	best := make([]float64, 4)
	for j := range best {
		best[j] = math.Inf(-1)
		for _, r := range s.Methods {
			best[j] = math.Max(best[j], r.Metrics[BaseToNovelMetrics[j]])
		}
	}
	for i, r := range s.Methods {
		row := rows[i+1]
		if row[0] != r.Method {
			t.Errorf("row %d method = %q, want %q", i, row[0], r.Method)
		}
		vals := make([]float64, 4)
		for j, k := range BaseToNovelMetrics {
			cell := row[j+1]
			bold := strings.HasPrefix(cell, "**")
			cell = strings.Trim(cell, "*")
			if dot := strings.IndexByte(cell, '.'); dot < 0 || len(cell)-dot-1 != 2 {
				t.Errorf("%s %s = %q, want 2 decimals", r.Method, k, cell)
			}
			v, err := strconv.ParseFloat(cell, 64)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(v-r.Metrics[k]) > 0.005 {
				t.Errorf("%s %s = %v, want %.2f", r.Method, k, v, r.Metrics[k])
			}
			if wantBold := r.Metrics[k] == best[j]; bold != wantBold {
				t.Errorf("%s %s bold = %v, want %v", r.Method, k, bold, wantBold)
			}
			vals[j] = v
		}
		// HM column consistent with the Local, Base and Novel columns.
		if hm := 3 / (1/vals[0] + 1/vals[1] + 1/vals[2]); math.Abs(hm-vals[3]) > 0.02 {
			t.Errorf("%s: HM %v inconsistent with L/B/N %v (expect %.2f)", r.Method, vals[3], vals[:3], hm)
		}
	}
}

func TestTableCells(t *testing.T) {
	tab := Table{
		Columns:  []string{"clipart", "avg"},
		Decimals: 1,
		Rows: []MethodResult{
			{Method: "a|b", Metrics: Metrics{"clipart": 12.345, "avg": math.NaN()}},
			{Method: "c", Metrics: Metrics{"avg": 7}},
		},
	}
	md := tab.Markdown()
	for _, want := range []string{"| Method | Clipart | Avg |", `| a\|b | 12.3 | NaN |`, "| c | - | 7.0 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "**") {
		t.Errorf("bold with fewer than two comparable values:\n%s", md)
	}
}

func TestTextTable(t *testing.T) {
	s := paperSummary()
	s.Set("A-very-long-method-name", eval.BaseToNovel(5, 6, 7))
	tab := s.Table("Base-to-novel")
	txt := tab.Text()
	lines := strings.Split(strings.TrimRight(txt, "\n"), "\n")
	if lines[0] != "Base-to-novel" {
		t.Errorf("title line = %q", lines[0])
	}
	body := lines[1:]
	if len(body) != 2+len(s.Methods) {
		t.Fatalf("%d lines, want %d:\n%s", len(body), 2+len(s.Methods), txt)
	}
	// Aligned: every line has the same length and numbers end at the same
	// positions as the header titles.
	n := utf8.RuneCountInString(body[0])
	for _, l := range body {
		if utf8.RuneCountInString(l) != n {
			t.Errorf("line %q has length %d, want %d", l, utf8.RuneCountInString(l), n)
		}
	}
	hdr := body[0]
	if !strings.HasPrefix(hdr, "Method ") || !strings.HasSuffix(hdr, "  HM") {
		t.Errorf("header = %q", hdr)
	}
	// Same data as the Markdown table: each row holds the same formatted cells.
	mdRows := parseMarkdownTable(t, tab.Markdown())
	for i, l := range body[2:] {
		fields := strings.Fields(l)
		want := mdRows[i+1]
		for j := range want {
			want[j] = strings.Trim(want[j], "*")
		}
		if strings.Join(fields, " ") != strings.Join(want, " ") {
			t.Errorf("text row %v != markdown row %v", fields, want)
		}
	}
}

func TestWriteMarkdown(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "report.md")
	doc := Document{
		Title:  "pFedMMA on DTD",
		Text:   "Seed 1, 50 rounds.\n",
		Tables: []Table{paperSummary().Table("Base-to-novel")},
		Images: []Image{{Path: "curves.png", Caption: "Learning curves"}, {Path: "my plots/bar.png", Caption: "Final"}},
	}
	if err := WriteMarkdown(path, doc); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{"# pFedMMA on DTD\n\nSeed 1, 50 rounds.\n\n**Base-to-novel**", "| pFedMMA | 97.17 |",
		"![Learning curves](curves.png)", "![Final](<my plots/bar.png>)\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("report.md lacks %q:\n%s", want, got)
		}
	}
	if strings.HasSuffix(got, "\n\n") {
		t.Error("report.md ends with a blank line")
	}
	if err := WriteMarkdown(filepath.Join(dir, "missing", "r.md"), doc); err == nil {
		t.Error("write into a missing directory succeeded")
	}
}

func TestColumnTitle(t *testing.T) {
	tests := map[string]string{"hm": "HM", "local": "Local", "novel": "Novel", "sketch": "Sketch", "beta0.1": "Beta0.1", "": "", "élan": "Élan"}
	for in, want := range tests {
		if got := ColumnTitle(in); got != want {
			t.Errorf("ColumnTitle(%q) = %q, want %q", in, got, want)
		}
	}
}
