package docsgen

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/pfedmma/pfedmma/report"
)

// A figure is one number of the prose read from its evidence: a generated
// block named fig-… whose marker names the JSON file (relative to the
// repository root), the path of the value in it and, optionally, its
// format,
//
//	<!-- generated:fig-deploy-local (make docs; from docs/deploy/comparison.json plain_last_round.local %.2f) -->81.36<!-- /generated:fig-deploy-local -->
//
// "FILE PATH - PATH2 [FORMAT]" gives a difference of two values of the
// file, "FILE PATH - FILE2 PATH2 [FORMAT]" of two files (FILE2 ends in
// .json or .jsonl). The path is dot-separated keys and array indices (negative from the end;
// a .jsonl file is the array of its lines); the format is a Go
// verb for a float64 (%.2f when left out; a + in it writes a negative
// value with the minus sign −; a positive scale before it multiplies:
// 100*%.1f writes a fraction in percent, 0.001*%.1f bytes in kB, 1/3600*%.1f
// seconds in hours). In a Go
// benchmark's output (a .txt file) the path is NAME@UNIT: the value
// before UNIT on the line of benchmark NAME (BenchmarkRound/sites=10-2@site-cpu-ms). A figure's evidence is its marker, so the
// prose can quote any number of any evidence file without a renderer per
// number: FigureBlocks renders every figure the files hold.
const figurePrefix = "fig-"

// A run table is a generated block named table-… whose marker names a
// run's summary.json: its body is the table `pfedmma run` prints for it
// (report.Summary.Table, without a title), in a code fence.
const runTablePrefix = "table-"

var figureMarker = regexp.MustCompile(`<!-- generated:((?:` + figurePrefix + `|` + runTablePrefix + `|` + tuneTablePrefix + `)[a-z0-9-]+) \(make docs; from ([^)]*)\) -->`)

// FigureBlocks renders every figure and run table the files hold from the
// evidence its marker names, under root (the repository root).
func FigureBlocks(root string, files []File) ([]Block, error) {
	var blocks []Block
	seen := map[string]string{}
	for _, f := range files {
		for _, m := range figureMarker.FindAllStringSubmatch(f.Text, -1) {
			name, source := m[1], m[2]
			if prev, ok := seen[name]; ok {
				return nil, fmt.Errorf("%s: figure %q appears in %s too", f.Path, name, prev)
			}
			seen[name] = f.Path
			render := renderFigure
			switch {
			case strings.HasPrefix(name, runTablePrefix):
				render = renderRunTable
			case strings.HasPrefix(name, tuneTablePrefix):
				render = renderTuneTable
			}
			body, err := render(root, source)
			if err != nil {
				return nil, fmt.Errorf("%s: figure %q: %w", f.Path, name, err)
			}
			blocks = append(blocks, Block{Name: name, Source: source, Body: body})
		}
	}
	return blocks, nil
}

// renderFigure formats the value source names: "FILE PATH [- PATH2]
// [FORMAT]" (PATH2, in the same file, is subtracted: a difference the
// prose states).
func renderFigure(root, source string) (string, error) {
	fields := strings.Fields(source)
	var minus, minusFile string
	if len(fields) >= 5 && fields[2] == "-" && isEvidenceFile(fields[3]) {
		minusFile, minus = fields[3], fields[4]
		fields = append(fields[:2], fields[5:]...)
	} else if len(fields) >= 4 && fields[2] == "-" {
		minus = fields[3]
		fields = append(fields[:2], fields[4:]...)
	}
	if len(fields) < 2 || len(fields) > 3 {
		return "", fmt.Errorf("source %q: want FILE PATH [- PATH] [FORMAT]", source)
	}
	format, scale := "%.2f", 1.0
	if len(fields) == 3 {
		format = fields[2]
		if i := strings.Index(format, "*%"); i > 0 {
			x, err := parseScale(format[:i])
			if err != nil || x <= 0 {
				return "", fmt.Errorf("source %q: scale %q is not a positive number", source, format[:i])
			}
			format, scale = format[i+1:], x // 100*: a fraction in percent; 0.001*: B in kB
		}
		if !strings.HasPrefix(format, "%") || strings.Count(format, "%") != 1 {
			return "", fmt.Errorf("source %q: format %q is not one Go verb", source, format)
		}
	}
	file := filepath.Join(root, filepath.FromSlash(fields[0]))
	v, err := evidenceValue(file, fields[1])
	if err != nil {
		return "", err
	}
	if minus != "" {
		other := file
		if minusFile != "" {
			other = filepath.Join(root, filepath.FromSlash(minusFile))
		}
		w, err := evidenceValue(other, minus)
		if err != nil {
			return "", err
		}
		v -= w
	}
	s := fmt.Sprintf(format, v*scale)
	if strings.Contains(format, "+") && strings.HasPrefix(s, "-") {
		s = "−" + s[1:]
	}
	return s, nil
}

// jsonValue reads the number at path (dot-separated keys and array
// indices, negative ones from the end) of the JSON file at file; a .jsonl
// file is the array of its lines (metrics.jsonl: 0 is round 0's record).
func jsonValue(file, path string) (float64, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	v, err := decodeEvidence(file, data)
	if err != nil {
		return 0, err
	}
	at := ""
	for _, key := range strings.Split(path, ".") {
		at = strings.TrimPrefix(at+"."+key, ".")
		switch x := v.(type) {
		case map[string]any:
			next, ok := x[key]
			if !ok {
				return 0, fmt.Errorf("%s: no key %s", file, at)
			}
			v = next
		case []any:
			i, err := strconv.Atoi(key)
			if err == nil && i < 0 {
				i += len(x) // from the end: -1 is the last
			}
			if err != nil || i < 0 || i >= len(x) {
				return 0, fmt.Errorf("%s: %s: want an index below %d", file, at, len(x))
			}
			v = x[i]
		default:
			return 0, fmt.Errorf("%s: %s: a %T has no key %s", file, at, v, key)
		}
	}
	f, ok := v.(float64)
	if !ok || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%s: %s is %v, not a number", file, path, v)
	}
	return f, nil
}

// decodeEvidence decodes a JSON file, or a JSON-lines file (.jsonl) as the
// array of its lines.
func decodeEvidence(file string, data []byte) (any, error) {
	if !strings.HasSuffix(file, ".jsonl") {
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		return v, nil
	}
	var lines []any
	for i, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var v any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			return nil, fmt.Errorf("%s: line %d: %w", file, i+1, err)
		}
		lines = append(lines, v)
	}
	return lines, nil
}

// renderRunTable renders the runs source names (one or more files: a
// run's summary.json, or the metrics.jsonl of a run stopped before its
// summary, of which each method's last record counts) as one table shaped
// as `pfedmma run` prints it: the methods in the order the files list
// them, a method's numbers from a summary.json when one holds it (a
// finished run's, not a stopped one's last round), the columns of the
// first summary.json.
func renderRunTable(root, source string) (string, error) {
	type file struct {
		order []string
		vals  map[string]report.Metrics
		final bool // a summary.json
	}
	var files []file
	var merged report.Summary
	final := map[string]report.Metrics{}
	for _, rel := range strings.Fields(source) {
		path := filepath.Join(root, filepath.FromSlash(rel))
		f := file{vals: map[string]report.Metrics{}}
		if strings.HasSuffix(rel, ".jsonl") {
			recs, err := readRecords(path)
			if err != nil {
				return "", err
			}
			for _, r := range recs {
				if _, ok := f.vals[r.Method]; !ok {
					f.order = append(f.order, r.Method)
				}
				f.vals[r.Method] = r.Mean
			}
		} else {
			s, err := report.ReadSummary(path)
			if err != nil {
				return "", err
			}
			if merged.Metrics == nil {
				merged.Protocol, merged.Metrics = s.Protocol, s.Metrics
			}
			f.final = true
			for _, r := range s.Methods {
				f.order = append(f.order, r.Method)
				f.vals[r.Method] = r.Metrics
				if _, ok := final[r.Method]; !ok {
					final[r.Method] = r.Metrics
				}
			}
		}
		files = append(files, f)
	}
	if merged.Metrics == nil {
		return "", fmt.Errorf("%s: a run table needs a summary.json (its columns)", source)
	}
	seen := map[string]bool{}
	for _, f := range files {
		for _, m := range f.order {
			if seen[m] {
				continue
			}
			seen[m] = true
			v, ok := final[m]
			if !ok {
				v = f.vals[m]
			}
			merged.Methods = append(merged.Methods, report.MethodResult{Method: m, Metrics: v})
		}
	}
	return "\n```\n" + merged.Table("").Text() + "```\n", nil
}

// readRecords reads a run's metrics.jsonl, one round record a line.
func readRecords(path string) ([]report.RoundRecord, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var recs []report.RoundRecord
	for i, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r report.RoundRecord
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			return nil, fmt.Errorf("%s: line %d: %w", path, i+1, err)
		}
		recs = append(recs, r)
	}
	return recs, nil
}

// isEvidenceFile: a field of a figure's source that names a file.
func isEvidenceFile(f string) bool {
	return strings.HasSuffix(f, ".json") || strings.HasSuffix(f, ".jsonl")
}

// evidenceValue reads one number of an evidence file: a JSON or JSON-lines
// file by its path (jsonValue), or a Go benchmark's output (.txt) by
// NAME@UNIT (benchValue).
func evidenceValue(file, path string) (float64, error) {
	if strings.HasSuffix(file, ".txt") {
		return benchValue(file, path)
	}
	return jsonValue(file, path)
}

// benchValue reads the value a `go test -bench` output reports for unit on
// the line of the benchmark named name (path is NAME@UNIT); a name on no
// line or on two, or a unit the line lacks, is an error naming them. A
// NAME ending in * with UNIT:min or UNIT:max gives the least or greatest
// value over the benchmarks whose names start with the rest (a range the
// prose states: BenchmarkViTShapes/*@GFLOP/s:min).
func benchValue(file, path string) (float64, error) {
	name, unit, ok := strings.Cut(path, "@")
	if !ok {
		return 0, fmt.Errorf("%s: path %q: want BENCHMARK@UNIT", file, path)
	}
	prefix, many := strings.CutSuffix(name, "*")
	unit, agg, _ := strings.Cut(unit, ":")
	if many != (agg == "min" || agg == "max") {
		return 0, fmt.Errorf("%s: path %q: a NAME* takes UNIT:min or UNIT:max, a NAME neither", file, path)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	var vals []float64
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || (!many && f[0] != name) || (many && !strings.HasPrefix(f[0], prefix)) {
			continue
		}
		v, err := benchUnit(f, unit)
		if err != nil {
			return 0, fmt.Errorf("%s: %s: %w", file, f[0], err)
		}
		vals = append(vals, v)
	}
	switch {
	case len(vals) == 0:
		return 0, fmt.Errorf("%s: no benchmark %s", file, name)
	case !many && len(vals) > 1:
		return 0, fmt.Errorf("%s: benchmark %s appears twice", file, name)
	case agg == "max":
		return slices.Max(vals), nil
	}
	return slices.Min(vals), nil
}

// benchUnit reads the value before unit on one benchmark line's fields.
func benchUnit(fields []string, unit string) (float64, error) {
	for i := 2; i+1 < len(fields); i++ {
		if fields[i+1] == unit {
			return strconv.ParseFloat(fields[i], 64)
		}
	}
	return 0, fmt.Errorf("reports no %s", unit)
}

// parseScale reads a figure's scale: a number or a fraction 1/N.
func parseScale(s string) (float64, error) {
	if num, den, ok := strings.Cut(s, "/"); ok {
		a, err := strconv.ParseFloat(num, 64)
		if err != nil {
			return 0, err
		}
		b, err := strconv.ParseFloat(den, 64)
		if err != nil || b == 0 {
			return 0, fmt.Errorf("scale %q: bad denominator", s)
		}
		return a / b, nil
	}
	return strconv.ParseFloat(s, 64)
}
