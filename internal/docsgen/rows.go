package docsgen

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Row is one generated line of a table that is not generated whole: the
// line of the README whose text (indentation aside) starts with Prefix is
// Text. A table cannot hold marker comments between its rows, so such a
// line is found by its first cells.
type Row struct {
	Prefix string
	Text   string
	Source string
}

// compressRuns are the compression table's rows measured again since the
// table was written (docs/compress/<dir>/summary.json).
var compressRuns = []struct{ dir, label string }{
	{"clip_lora-none", "`clip_lora`"}, {"clip_lora-fp16", "`clip_lora`"}, {"clip_lora-int8", "`clip_lora`"},
	{"clip_lora-product-none", "`clip_lora` (`aggregate: product`)"},
	{"clip_lora-product-fp16", "`clip_lora` (`aggregate: product`)"},
	{"clip_lora-product-int8", "`clip_lora` (`aggregate: product`)"},
}

// RenderRows renders the compression table's re-measured rows from their
// summaries: codec, bytes up and down per round per site, Local, Base, Novel, HM.
func RenderRows(docsDir string) ([]Row, error) {
	var rows []Row
	for _, c := range compressRuns {
		rel := filepath.Join("compress", c.dir, "summary.json")
		path := filepath.Join(docsDir, rel)
		s, codec, up, down, err := readCompressSummary(path, "clip_lora")
		if err != nil {
			return nil, err
		}
		m := s.Methods["clip_lora"]
		prefix := fmt.Sprintf("| %s | %s |", c.label, codec)
		text := fmt.Sprintf("%s %s | %s | %.2f | %.2f | %.2f | %.2f |", prefix, thousands(up), thousands(down), m["local"], m["base"], m["novel"], m["hm"])
		rows = append(rows, Row{Prefix: prefix, Text: text, Source: "docs/" + filepath.ToSlash(rel)})
	}
	return rows, nil
}

func readCompressSummary(path, method string) (summary, string, float64, float64, error) {
	s, err := readSummary(path)
	if err != nil {
		return s, "", 0, 0, err
	}
	var extra struct {
		Compress string             `json:"compress"`
		Up       map[string]float64 `json:"update_bytes_per_round_per_site"`
		Down     map[string]float64 `json:"download_bytes_per_round_per_site"`
	}
	if err := readJSON(path, &extra); err != nil {
		return s, "", 0, 0, err
	}
	up, okU := extra.Up[method]
	down, okD := extra.Down[method]
	if extra.Compress == "" || !okU || !okD {
		return s, "", 0, 0, fmt.Errorf("%s: keys compress, update_bytes_per_round_per_site.%s and download_bytes_per_round_per_site.%s are required", path, method, method)
	}
	if _, ok := s.Methods[method]; !ok {
		return s, "", 0, 0, fmt.Errorf("%s: methods lacks %s", path, method)
	}
	return s, extra.Compress, up, down, nil
}

// UpdateRows replaces each row's line in readme; a prefix found on no line,
// or on more than one, is an error naming it.
func UpdateRows(readme string, rows []Row) (string, error) {
	lines := strings.Split(readme, "\n")
	for _, r := range rows {
		at := -1
		for i, l := range lines {
			if strings.HasPrefix(strings.TrimLeft(l, " "), r.Prefix) {
				if at >= 0 {
					return "", fmt.Errorf("README: row %q (from %s) appears on lines %d and %d", r.Prefix, r.Source, at+1, i+1)
				}
				at = i
			}
		}
		if at < 0 {
			return "", fmt.Errorf("README: row %q (from %s) not found", r.Prefix, r.Source)
		}
		l := lines[at]
		lines[at] = l[:len(l)-len(strings.TrimLeft(l, " "))] + r.Text
	}
	return strings.Join(lines, "\n"), nil
}

// DiffRows names each row whose README line differs from its evidence.
func DiffRows(readme string, rows []Row) ([]string, error) {
	var diffs []string
	for _, r := range rows {
		want, err := UpdateRows(readme, []Row{r})
		if err != nil {
			return nil, err
		}
		if want != readme {
			diffs = append(diffs, fmt.Sprintf("row %q differs from its evidence (%s): want %q", r.Prefix, r.Source, r.Text))
		}
	}
	return diffs, nil
}
