package report

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Table is a results table shaped like the pFedMMA paper's Table 1: one row
// per method, one column per metric (Local, Base, Novel, HM for
// base-to-novel; accuracy for Dirichlet; per-domain accuracy and average for
// feature shift).
type Table struct {
	Title    string
	Columns  []string // metric keys, in order
	Rows     []MethodResult
	Decimals int // digits after the point; 0 means 2
}

// Table returns the summary as a table titled title.
func (s *Summary) Table(title string) Table {
	return Table{Title: title, Columns: s.Columns(), Rows: s.Methods}
}

// columnTitles are the display names of well-known metric keys.
var columnTitles = map[string]string{
	"local": "Local", "base": "Base", "novel": "Novel", "hm": "HM",
	"acc": "Acc", "accuracy": "Accuracy", "avg": "Avg", "average": "Average",
	"mean": "Mean", "loss": "Loss", "val": "Val",
}

// ColumnTitle returns the display name of a metric key: "hm" → "HM",
// "local" → "Local"; other keys get an upper-case first letter.
func ColumnTitle(key string) string {
	if t, ok := columnTitles[key]; ok {
		return t
	}
	r, n := utf8.DecodeRuneInString(key)
	if r == utf8.RuneError {
		return key
	}
	return strings.ToUpper(string(r)) + key[n:]
}

// cell formats the value of column k in row r: fixed decimals, "-" when
// missing.
func (t Table) cell(r MethodResult, k string) string {
	v, ok := r.Metrics[k]
	if !ok {
		return "-"
	}
	d := t.Decimals
	if d <= 0 {
		d = 2
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return formatFloat(v)
	}
	c := strconv.FormatFloat(v, 'f', d, 64)
	if sd, ok := r.Std[k]; ok && !math.IsNaN(sd) {
		c += " ± " + strconv.FormatFloat(sd, 'f', d, 64)
	}
	return c
}

// best reports, per column, the largest finite value (formatted), or "" when
// fewer than two rows have the column.
func (t Table) best() []string {
	out := make([]string, len(t.Columns))
	for j, k := range t.Columns {
		n, max := 0, math.Inf(-1)
		var at MethodResult
		for _, r := range t.Rows {
			v, ok := r.Metrics[k]
			if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			n++
			if v > max {
				max, at = v, r
			}
		}
		if n >= 2 {
			out[j] = t.cell(at, k)
		}
	}
	return out
}

// escapeCell makes s safe inside a Markdown table cell.
func escapeCell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}

// Markdown renders the table in GitHub-flavoured Markdown, preceded by its
// title in bold when set. Numbers are right-aligned with fixed decimals; the
// best (largest) value of each column is bold, as in the paper.
func (t Table) Markdown() string {
	var sb strings.Builder
	if t.Title != "" {
		fmt.Fprintf(&sb, "**%s**\n\n", escapeCell(t.Title))
	}
	sb.WriteString("| Method |")
	for _, k := range t.Columns {
		sb.WriteString(" " + escapeCell(ColumnTitle(k)) + " |")
	}
	sb.WriteString("\n|:--|")
	for range t.Columns {
		sb.WriteString("--:|")
	}
	sb.WriteByte('\n')
	best := t.best()
	for _, r := range t.Rows {
		sb.WriteString("| " + escapeCell(r.Method) + " |")
		for j, k := range t.Columns {
			c := t.cell(r, k)
			if best[j] != "" && c == best[j] {
				c = "**" + c + "**"
			}
			sb.WriteString(" " + c + " |")
		}
		sb.WriteByte('\n')
	}
	return sb.String()
}

// Text renders the table as aligned plain text for a terminal: title line,
// header, rule, then one row per method; method names left-aligned, numbers
// right-aligned.
func (t Table) Text() string {
	cells := [][]string{append([]string{"Method"}, mapTitles(t.Columns)...)}
	for _, r := range t.Rows {
		row := []string{r.Method}
		for _, k := range t.Columns {
			row = append(row, t.cell(r, k))
		}
		cells = append(cells, row)
	}
	width := make([]int, len(cells[0]))
	for _, row := range cells {
		for j, c := range row {
			width[j] = max(width[j], utf8.RuneCountInString(c))
		}
	}
	var sb strings.Builder
	if t.Title != "" {
		sb.WriteString(t.Title + "\n")
	}
	line := func(row []string) {
		var b strings.Builder
		for j, c := range row {
			pad := strings.Repeat(" ", width[j]-utf8.RuneCountInString(c))
			if j == 0 {
				b.WriteString(c + pad)
			} else {
				b.WriteString("  " + pad + c)
			}
		}
		sb.WriteString(strings.TrimRight(b.String(), " ") + "\n")
	}
	line(cells[0])
	rule := make([]string, len(width))
	for j, w := range width {
		rule[j] = strings.Repeat("-", w)
	}
	line(rule)
	for _, row := range cells[1:] {
		line(row)
	}
	return sb.String()
}

func mapTitles(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = ColumnTitle(k)
	}
	return out
}

// Image is a picture embedded in a Document, by path relative to the
// document.
type Image struct {
	Path    string
	Caption string
}

// Document is the content of report.md: a title, free Markdown text (e.g.
// the configuration), tables and images, in that order.
type Document struct {
	Title  string
	Text   string
	Tables []Table
	Images []Image
}

// Markdown renders the document.
func (d Document) Markdown() string {
	var sb strings.Builder
	if d.Title != "" {
		fmt.Fprintf(&sb, "# %s\n\n", d.Title)
	}
	if d.Text != "" {
		sb.WriteString(strings.TrimRight(d.Text, "\n") + "\n\n")
	}
	for _, t := range d.Tables {
		sb.WriteString(t.Markdown())
		sb.WriteByte('\n')
	}
	for _, im := range d.Images {
		p := im.Path
		if strings.ContainsAny(p, " ()") {
			p = "<" + p + ">"
		}
		fmt.Fprintf(&sb, "![%s](%s)\n\n", strings.ReplaceAll(im.Caption, "]", `\]`), p)
	}
	return strings.TrimRight(sb.String(), "\n") + "\n"
}

// WriteMarkdown writes d to path (conventionally report.md), atomically.
func WriteMarkdown(path string, d Document) error {
	return writeFileAtomic(path, func(w io.Writer) error {
		_, err := io.WriteString(w, d.Markdown())
		return err
	})
}
