package docsgen

import (
	"fmt"
	"math"
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

// compressRuns are the compression table's rows, each from the
// summary.json of its run (docs/compress/<dir>/summary.json) and the
// method's numbers in it.
var compressRuns = []struct{ dir, label, method string }{
	{"pfedmma-none", "`pfedmma`", "pfedmma"}, {"pfedmma-fp16", "`pfedmma`", "pfedmma"}, {"pfedmma-int8", "`pfedmma`", "pfedmma"},
	{"four-none", "`promptfl`", "promptfl"}, {"four-fp16", "`promptfl`", "promptfl"}, {"four-int8", "`promptfl`", "promptfl"},
	{"four-none", "`fedotp`", "fedotp"}, {"four-fp16", "`fedotp`", "fedotp"}, {"four-int8", "`fedotp`", "fedotp"},
	{"four-none", "`clip_adapter`", "clip_adapter"}, {"four-fp16", "`clip_adapter`", "clip_adapter"}, {"four-int8", "`clip_adapter`", "clip_adapter"},
	{"clip_lora-none", "`clip_lora`", "clip_lora"}, {"clip_lora-fp16", "`clip_lora`", "clip_lora"}, {"clip_lora-int8", "`clip_lora`", "clip_lora"},
	{"clip_lora-product-none", "`clip_lora` (`aggregate: product`)", "clip_lora"},
	{"clip_lora-product-fp16", "`clip_lora` (`aggregate: product`)", "clip_lora"},
	{"clip_lora-product-int8", "`clip_lora` (`aggregate: product`)", "clip_lora"},
}

// RenderRows renders the compression table's rows from their summaries: codec, bytes up and down per round per site, Local, Base, Novel, HM.
func RenderRows(docsDir string) ([]Row, error) {
	var rows []Row
	for _, c := range compressRuns {
		rel := filepath.Join("compress", c.dir, "summary.json")
		path := filepath.Join(docsDir, rel)
		s, codec, up, down, err := readCompressSummary(path, c.method)
		if err != nil {
			return nil, err
		}
		m := s.Methods[c.method]
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

// compressMetrics are the compression table's accuracy columns.
var compressMetrics = []struct{ key, name string }{{"local", "Local"}, {"base", "Base"}, {"novel", "Novel"}, {"hm", "HM"}}

// compressSummaryBlock renders the sentence that summarises the compression
// table: for fp16 and for int8, the largest move (points, against the same
// row uncompressed) of every row but the one that moves most, and that
// row's moves above it.
func compressSummaryBlock(docsDir string) (Block, error) {
	vals := map[string]map[string]float64{} // label|codec → metrics
	var labels []string
	for _, c := range compressRuns {
		path := filepath.Join(docsDir, "compress", c.dir, "summary.json")
		s, codec, _, _, err := readCompressSummary(path, c.method)
		if err != nil {
			return Block{}, err
		}
		if _, ok := vals[c.label+"|none"]; !ok && codec == "none" {
			labels = append(labels, c.label)
		}
		vals[c.label+"|"+codec] = s.Methods[c.method]
	}
	var parts []string
	for _, codec := range []string{"fp16", "int8"} {
		top, topMove, rest := "", -1.0, 0.0
		for _, l := range labels {
			base, ok1 := vals[l+"|none"]
			got, ok2 := vals[l+"|"+codec]
			if !ok1 || !ok2 {
				return Block{}, fmt.Errorf("compression table: %s lacks its none or %s row", l, codec)
			}
			move := 0.0
			for _, m := range compressMetrics {
				move = max(move, math.Abs(got[m.key]-base[m.key]))
			}
			if move > topMove {
				rest, top, topMove = max(rest, topMove), l, move
			} else {
				rest = max(rest, move)
			}
		}
		var moves []string
		for _, m := range compressMetrics {
			if d := vals[top+"|"+codec][m.key] - vals[top+"|none"][m.key]; math.Abs(d) > rest {
				moves = append(moves, fmt.Sprintf("%s %s", m.name, signed(d)))
			}
		}
		parts = append(parts, fmt.Sprintf("with %s every row's accuracy moves by at most %.2f points but %s's (%s)", codec, rest, top, strings.Join(moves, ", ")))
	}
	body := strings.ToUpper(parts[0][:1]) + parts[0][1:] + "; " + parts[1] + "."
	return Block{Name: "compress-summary", Source: "docs/compress/*/summary.json", Body: body}, nil
}

// signed writes a difference with its sign, the minus as −.
func signed(d float64) string {
	s := fmt.Sprintf("%+.2f", d)
	if strings.HasPrefix(s, "-") {
		return "−" + s[1:]
	}
	return s
}
