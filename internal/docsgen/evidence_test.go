package docsgen

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTuneBlockMatchesTuneMD renders every tune under docs/tuning from its
// trials.json and compares it with the table of the tune.md that `pfedmma
// tune` wrote at the time (the oracle: the tool's own output, not this
// renderer).
func TestTuneBlockMatchesTuneMD(t *testing.T) {
	dirs, err := filepath.Glob("../../docs/tuning/*/trials.json")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no docs/tuning/*/trials.json: %v", err)
	}
	for _, trials := range dirs {
		dir := filepath.Dir(trials)
		md, err := os.ReadFile(filepath.Join(dir, "tune.md"))
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, l := range strings.Split(string(md), "\n") {
			if strings.HasPrefix(l, "|") {
				want = append(want, l)
			}
		}
		rel, _ := filepath.Rel("../..", trials)
		got, err := renderTuneTable("../..", filepath.ToSlash(rel))
		if err != nil {
			t.Fatal(err)
		}
		if w := "\n\n" + strings.Join(want, "\n") + "\n\n"; got != w {
			t.Errorf("%s: the tune block is\n%s\nthe tune.md table is\n%s", rel, got, w)
		}
	}
}

// TestTrialsRefused: a trials.json whose chosen trial is not among its
// trials, or whose trials lack a seed's score, is an error naming the file.
func TestTrialsRefused(t *testing.T) {
	dir := t.TempDir()
	plan := map[string]any{"method": "m", "grid": []map[string]any{{"key": "a", "values": []string{"1"}}}, "seeds": []int{1, 2}}
	trial := map[string]any{"trial": 1, "settings": []map[string]any{{"key": "a", "value": "1"}}, "val": 50.0, "seeds": []int{1, 2}, "val_per_seed": []float64{40, 60}}
	for name, v := range map[string]map[string]any{
		"chosen.json": {"plan": plan, "trials": []any{trial}, "chosen": 2},
		"seeds.json":  {"plan": plan, "trials": []any{map[string]any{"trial": 1, "settings": trial["settings"], "val": 50.0, "val_per_seed": []float64{40}}}, "chosen": 1},
	} {
		writeJSON(t, filepath.Join(dir, name), v)
		if _, err := renderTuneTable(dir, name); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: err = %v, want one naming the file", name, err)
		}
	}
}

const benchOut = `goos: linux
BenchmarkRound/sites=10-2         	       3	 457389348 ns/op	      7976 down-B/site	         4.358 site-cpu-ms
BenchmarkRound/sites=100-2        	       3	25228028377 ns/op	     81275 down-B/site	        37.13 site-cpu-ms
BenchmarkOther-2                  	       1	 1000 ns/op	       2.5 MB/s
`

// TestBenchFigures reads Go benchmark output as figures: one benchmark's
// unit, the least and greatest over a prefix, with a scale, and refuses a
// missing benchmark or unit naming it.
func TestBenchFigures(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "b.txt"), []byte(benchOut), 0o644); err != nil {
		t.Fatal(err)
	}
	for src, want := range map[string]string{
		"b.txt BenchmarkRound/sites=10-2@site-cpu-ms %.1f":                                          "4.4",
		"b.txt BenchmarkRound/sites=100-2@down-B/site 0.001*%.1f":                                   "81.3",
		"b.txt BenchmarkRound/*@site-cpu-ms:min %.2f":                                               "4.36",
		"b.txt BenchmarkRound/*@site-cpu-ms:max %.2f":                                               "37.13",
		"b.txt BenchmarkRound/sites=100-2@ns/op 1/1e9*%.1f":                                         "25.2",
		"b.txt BenchmarkRound/sites=100-2@site-cpu-ms - BenchmarkRound/sites=10-2@site-cpu-ms %.2f": "32.77",
	} {
		got, err := renderFigure(root, src)
		if err != nil || got != want {
			t.Errorf("renderFigure(%q) = %q, %v; want %q", src, got, err, want)
		}
	}
	for _, src := range []string{"b.txt BenchmarkNone-2@ns/op", "b.txt BenchmarkOther-2@site-cpu-ms", "b.txt BenchmarkRound/*@ns/op", "b.txt BenchmarkOther-2"} {
		if _, err := renderFigure(root, src); err == nil || !strings.Contains(err.Error(), "b.txt") {
			t.Errorf("renderFigure(%q): err = %v, want one naming the file", src, err)
		}
	}
}

// TestFigureAcrossFiles subtracts a value of a second file and scales by a
// fraction.
func TestFigureAcrossFiles(t *testing.T) {
	root := t.TempDir()
	writeJSON(t, filepath.Join(root, "a.json"), map[string]any{"x": 90.0, "s": 7200.0})
	writeJSON(t, filepath.Join(root, "b.json"), map[string]any{"y": 81.5})
	for src, want := range map[string]string{
		"a.json x - b.json y %.1f":  "8.5",
		"a.json s 1/3600*%.1f":      "2.0",
		"a.json x - b.json y %+.1f": "+8.5",
	} {
		if got, err := renderFigure(root, src); err != nil || got != want {
			t.Errorf("renderFigure(%q) = %q, %v; want %q", src, got, err, want)
		}
	}
}

// TestCompressSummary computes the compression table's summary sentence
// from summaries whose moves were chosen by hand: with fp16 the rows move
// by at most 0.30 but clip_adapter's Local (−2.00); with int8 at most 0.50
// but promptfl's Novel (+1.00) and HM (−0.75).
func TestCompressSummary(t *testing.T) {
	dir := t.TempDir()
	moves := map[string]map[string]map[string]float64{ // codec → method → metric → move
		"fp16": {"clip_adapter": {"local": -2}, "promptfl": {"base": 0.3}},
		"int8": {"promptfl": {"novel": 1, "hm": -0.75}, "pfedmma": {"local": 0.5}},
	}
	byDir := map[string]map[string]any{}
	for _, run := range compressRuns {
		codec := run.dir[strings.LastIndex(run.dir, "-")+1:]
		m := map[string]any{}
		for _, k := range []string{"local", "base", "novel", "hm"} {
			m[k] = 80.0 + moves[codec][run.method][k]
		}
		if byDir[run.dir] == nil {
			byDir[run.dir] = map[string]any{"metrics": []string{"local", "base", "novel", "hm"}, "compress": codec,
				"methods": map[string]any{}, "update_bytes_per_round_per_site": map[string]any{}, "download_bytes_per_round_per_site": map[string]any{}}
		}
		byDir[run.dir]["methods"].(map[string]any)[run.method] = m
		byDir[run.dir]["update_bytes_per_round_per_site"].(map[string]any)[run.method] = 1
		byDir[run.dir]["download_bytes_per_round_per_site"].(map[string]any)[run.method] = 1
	}
	for d, v := range byDir {
		writeJSON(t, filepath.Join(dir, "compress", d, "summary.json"), v)
	}
	b, err := compressSummaryBlock(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := "With fp16 every row's accuracy moves by at most 0.30 points but `clip_adapter`'s (Local −2.00); " +
		"with int8 every row's accuracy moves by at most 0.50 points but `promptfl`'s (Novel +1.00, HM −0.75)."
	if b.Body != want {
		t.Errorf("compress summary = %q\nwant %q", b.Body, want)
	}
}
