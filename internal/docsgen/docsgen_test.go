package docsgen

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/methods"
	_ "github.com/pfedmma/pfedmma/methods/all"
)

// TestReadmeMatchesEvidence holds the generated blocks of README.md,
// docs/*.md and methods/*/README.md equal to what the evidence under docs/
// renders: a number edited by hand in a block, or an evidence file changed
// without `make docs`, fails here, naming the file.
func TestReadmeMatchesEvidence(t *testing.T) {
	files, blocks, rows := repoDocs(t)
	diffs, err := DiffFiles(files, blocks, rows)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		t.Errorf("%s (run make docs)", d)
	}
}

func repoDocs(t *testing.T) ([]File, []Block, []Row) {
	t.Helper()
	files, err := Files("../..")
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := Render("../../docs")
	if err != nil {
		t.Fatal(err)
	}
	var ms []MethodSettings
	for _, m := range methods.All() {
		ms = append(ms, MethodSettings{Name: m.Info().Name, Defaults: m.DefaultConfig()})
	}
	settings, err := SettingsBlocks("../..", ms)
	if err != nil {
		t.Fatal(err)
	}
	blocks = append(blocks, settings...)
	figs, err := FigureBlocks("../..", files)
	if err != nil {
		t.Fatal(err)
	}
	blocks = append(blocks, figs...)
	rows, err := RenderRows("../../docs")
	if err != nil {
		t.Fatal(err)
	}
	return files, blocks, rows
}

// TestHandEditDetected edits one number of the rendered docs/performance.md
// and one of a method's README, as hand edits would, and expects DiffFiles
// to name the file and the block.
func TestHandEditDetected(t *testing.T) {
	files, blocks, rows := repoDocs(t)
	good, err := UpdateFiles(files, blocks, rows)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ file, num, edit, block string }{
		// PromptFL's cached training ratio, sitting 1 against sitting 1, in the
		// table of docs/performance.md and in PromptFL's speed row; a
		// compression row of docs/deploy.md; a default in a settings table
		{"docs/performance.md", "**42.7×**", "**47.6×**", `"sitting-table"`},
		{"methods/promptfl/README.md", "**42.7×**", "**47.6×**", `"speed-promptfl"`},
		{"docs/deploy.md", "| `clip_lora` | fp16 | ", "| `clip_lora` | fp16 | 1", "clip_lora"},
		{"methods/fedotp/README.md", "| `fedotp.eps` | `0.01` |", "| `fedotp.eps` | `0.1` |", `"settings-fedotp"`},
	} {
		bad := append([]File(nil), good...)
		i := slices.IndexFunc(bad, func(f File) bool { return strings.HasSuffix(f.Path, c.file) })
		if i < 0 || !strings.Contains(bad[i].Text, c.num) {
			t.Fatalf("%s missing, or without %s", c.file, c.num)
		}
		bad[i].Text = strings.Replace(bad[i].Text, c.num, c.edit, 1)
		diffs, err := DiffFiles(bad, blocks, rows)
		if err != nil {
			t.Fatal(err)
		}
		if len(diffs) != 1 || !strings.Contains(diffs[0], c.block) || !strings.Contains(diffs[0], c.file) {
			t.Errorf("DiffFiles after editing %s in %s = %q, want one difference naming the file and %s", c.num, c.file, diffs, c.block)
		}
	}
}

// TestPlacement: a block must live in exactly one file, each file's blocks
// are rewritten there, and a block or row found nowhere or twice is an
// error naming the files.
func TestPlacement(t *testing.T) {
	blocks := []Block{{Name: "a", Source: "x", Body: "1"}, {Name: "b", Source: "y", Body: "2"}}
	rows := []Row{{Prefix: "| r |", Text: "| r | 3 |", Source: "z"}}
	mark := func(name, body string) string {
		return "<!-- generated:" + name + " (make docs; from s) -->" + body + "<!-- /generated:" + name + " -->\n"
	}
	files := []File{{Path: "README.md", Text: "top\n" + mark("a", "9")}, {Path: "docs/p.md", Text: mark("b", "8") + "| r | 7 |\n"}}
	got, err := UpdateFiles(files, blocks, rows)
	if err != nil {
		t.Fatal(err)
	}
	want := []File{
		{Path: "README.md", Text: "top\n<!-- generated:a (make docs; from x) -->1<!-- /generated:a -->\n"},
		{Path: "docs/p.md", Text: "<!-- generated:b (make docs; from y) -->2<!-- /generated:b -->\n| r | 3 |\n"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("UpdateFiles = %q\nwant %q", got, want)
	}
	if d, err := DiffFiles(files, blocks, rows); err != nil || len(d) != 3 || !strings.HasPrefix(d[0], "README.md: ") || !strings.HasPrefix(d[2], "docs/p.md: ") {
		t.Errorf("DiffFiles on stale files = %q, %v; want 3 differences, each naming its file", d, err)
	}
	if d, err := DiffFiles(got, blocks, rows); err != nil || len(d) != 0 {
		t.Errorf("DiffFiles on updated files = %q, %v", d, err)
	}
	for _, c := range []struct {
		name  string
		files []File
		want  []string
	}{
		{"block twice", []File{files[0], {Path: "docs/q.md", Text: files[1].Text + mark("a", "1")}}, []string{`"a"`, "README.md", "docs/q.md"}},
		{"block nowhere", []File{{Path: "README.md", Text: "top\n"}, files[1]}, []string{"missing", "a", "README.md"}},
		{"row twice", []File{files[0], files[1], {Path: "methods/m/README.md", Text: "| r | 1 |\n"}}, []string{`"| r |"`, "docs/p.md", "methods/m/README.md"}},
		{"row nowhere", []File{files[0], {Path: "docs/p.md", Text: mark("b", "8")}}, []string{"not found", `"| r |"`}},
		{"unknown block", []File{files[0], {Path: "docs/p.md", Text: files[1].Text + mark("c", "1")}}, []string{`"c"`, "docs/p.md"}},
	} {
		_, err := UpdateFiles(c.files, blocks, rows)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: UpdateFiles err = %v, want one containing %s", c.name, err, w)
			}
		}
	}
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func run(train, eval, refTrain, refEval float64) map[string]any {
	return map[string]any{"method": "m", "batch": 32, "train_images_per_s": train, "eval_images_per_s": eval,
		"reference_train_images_per_s": refTrain, "reference_eval_images_per_s": refEval}
}

// fixtureDocs writes a docs folder with one method "m": the authors' run in
// sitting 1 at 4 / 5 images/s, pfedmma's cached run 10 / 20, uncached 5.6 / 5.5
// and bf16 14.4 / 9 (sitting 2), all divided by sitting 1's reference.
func fixtureDocs(t *testing.T) string {
	dir := t.TempDir()
	s := filepath.Join(dir, "sitting")
	writeJSON(t, filepath.Join(s, "1", "m-ref.json"), map[string]any{"method": "m", "batch": 32, "train_images_per_s": 4.0, "eval_images_per_s": 5.0})
	writeJSON(t, filepath.Join(s, "1", "m-fp32.json"), run(10, 20, 4, 5))
	writeJSON(t, filepath.Join(s, "2", "m-fp32-uncached.json"), run(5.6, 5.5, 4, 5))
	writeJSON(t, filepath.Join(s, "2", "m-bf16-uncached.json"), run(14.4, 9, 4, 5))
	writeJSON(t, filepath.Join(s, "table.json"), map[string]any{"rows": []any{map[string]any{
		"method": "m", "ref": "1/m-ref.json", "caches": "image features", "features": true,
		"cached":   map[string]any{"file": "1/m-fp32.json"},
		"uncached": map[string]any{"file": "2/m-fp32-uncached.json"},
		"bf16":     map[string]any{"file": "2/m-bf16-uncached.json"},
	}}})
	writeSummaries(t, dir, 90.9375, 91.09375)
	return dir
}

// writeSummaries writes the default job's fp32 and bf16 summaries: zero-shot
// equal in both, pFedMMA's Local fp32Local and bf16Local.
func writeSummaries(t *testing.T, dir string, fp32Local, bf16Local float64) {
	for _, p := range []struct {
		name  string
		local float64
	}{{"fp32", fp32Local}, {"bf16", bf16Local}} {
		writeJSON(t, filepath.Join(dir, DefaultJobDir, p.name, "summary.json"), map[string]any{
			"metrics": []string{"local", "hm"},
			"methods": map[string]any{
				"pfedmma":  map[string]any{"local": p.local, "hm": 80.5},
				"zeroshot": map[string]any{"local": 74.21875, "hm": 77.7316},
			},
			"protocol": "base2novel",
		})
	}
	// the settings the printed table's title names (dataset, clients)
	cfg := []byte("dataset:\n  name: world\nfederation:\n  clients: 7\n")
	if err := os.WriteFile(filepath.Join(dir, DefaultJobDir, "fp32", "config.yaml"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDefaultJobBlock checks the fp32 / bf16 block against the text written
// out by hand, zero-shot first, and the largest difference (91.09375 −
// 90.9375 = 0.15625, printed 0.16).
func TestDefaultJobBlock(t *testing.T) {
	blocks, err := renderFixture(fixtureDocs(t))
	if err != nil {
		t.Fatal(err)
	}
	want := "\n```\n" +
		"          fp32             bf16\n" +
		"zeroshot  74.22 77.73      74.22 77.73\n" +
		"pfedmma   90.94 80.50      91.09 80.50\n" +
		"```\n"
	if got := body(t, blocks, "default-job-bf16"); got != want {
		t.Errorf("default-job-bf16 =\n%s\nwant\n%s", got, want)
	}
	if got := body(t, blocks, "default-job-bf16-diff"); got != "The largest difference is 0.16 points (pfedmma local)." {
		t.Errorf("default-job-bf16-diff = %q", got)
	}
	// what `make run` prints, from the fp32 run (the JSON's method order)
	want = "\n```\n" +
		"world — base2novel, 7 clients\n" +
		"Method    Local     HM\n" +
		"--------  -----  -----\n" +
		"pfedmma   90.94  80.50\n" +
		"zeroshot  74.22  77.73\n" +
		"```\n"
	if got := body(t, blocks, "default-job-output"); got != want {
		t.Errorf("default-job-output =\n%s\nwant\n%s", got, want)
	}
}

func body(t *testing.T, blocks []Block, name string) string {
	t.Helper()
	for _, b := range blocks {
		if b.Name == name {
			return b.Body
		}
	}
	t.Fatalf("no block %q", name)
	return ""
}

// TestRatiosAndSittings checks the rendered row against ratios worked out by
// hand (10/4 = 2.5, 20/5 = 4.0, 5.6/4 = 1.4, 5.5/5 = 1.1, 14.4/4 = 3.6,
// 9/5 = 1.8) and the sittings of both sides.
func TestRatiosAndSittings(t *testing.T) {
	blocks, err := renderFixture(fixtureDocs(t))
	if err != nil {
		t.Fatal(err)
	}
	want := "| m | 4.000 / 5.000 (1) | 10.00 / 20.00 (**2.5×** / **4.0×**), 1 vs 1 | 5.60 / 5.50 (**1.4×** / **1.1×**), 2 vs 1 | 14.40 / 9.00 (**3.6×** / **1.8×**), 2 vs 1 | image features |\n"
	if got := body(t, blocks, "sitting-table"); !strings.HasSuffix(got, want) {
		t.Errorf("table =\n%s\nwant its row\n%s", got, want)
	}
	if got := body(t, blocks, "sitting-like-for-like"); !strings.Contains(got, "1.4–1.4× the authors in fp32 and 3.6–3.6× in bf16") {
		t.Errorf("like-for-like summary = %q", got)
	}
	if got := body(t, blocks, "sitting-cached"); !strings.Contains(got, "(m) 2.5–2.5× in training and 4.0–4.0× in evaluation") {
		t.Errorf("cached summary = %q", got)
	}
	if got := body(t, blocks, "sitting-above-bound"); strings.Contains(got, "m 1.4×") {
		t.Errorf("above-bound lists a row at the bound: %q", got)
	}
}

// TestReusedReferenceRefused: a reference copied into a later sitting must be
// named by the sitting it ran in.
func TestReusedReferenceRefused(t *testing.T) {
	dir := fixtureDocs(t)
	s := filepath.Join(dir, "sitting")
	data, err := os.ReadFile(filepath.Join(s, "1", "m-ref.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s, "2", "m-ref.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	manifest, err := os.ReadFile(filepath.Join(s, "table.json"))
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(manifest), `"1/m-ref.json"`, `"2/m-ref.json"`, 1)
	if err := os.WriteFile(filepath.Join(s, "table.json"), []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = renderFixture(dir)
	if err == nil || !strings.Contains(err.Error(), "reused reference") || !strings.Contains(err.Error(), "field ref") {
		t.Fatalf("Render with a reused reference: err = %v, want a reused-reference error naming field ref", err)
	}
}

// TestMispairedRunRefused: a run divided by other reference figures than the
// row's authors' file is refused, naming the field.
func TestMispairedRunRefused(t *testing.T) {
	dir := fixtureDocs(t)
	writeJSON(t, filepath.Join(dir, "sitting", "1", "m-fp32.json"), run(10, 20, 3.9, 5))
	_, err := renderFixture(dir)
	if err == nil || !strings.Contains(err.Error(), "field cached") || !strings.Contains(err.Error(), "divided by") {
		t.Fatalf("Render with a mispaired run: err = %v", err)
	}
}

// TestMissingMarkersRefused: Update refuses a README without a rendered
// block's markers, and a marker no renderer fills.
func TestMissingMarkersRefused(t *testing.T) {
	blocks := []Block{{Name: "a", Source: "x", Body: "1"}}
	if _, err := Update("no markers\n", blocks); err == nil || !strings.Contains(err.Error(), "a") {
		t.Errorf("Update without markers: err = %v", err)
	}
	readme := "<!-- generated:b (make docs; from y) -->2<!-- /generated:b -->\n"
	if _, err := Update(readme, blocks); err == nil || !strings.Contains(err.Error(), `"b"`) {
		t.Errorf("Update with an unknown block: err = %v", err)
	}
	// a source with parentheses would hide the block from the marker pattern
	if _, err := Update("<!-- generated:a (make docs; from f(x)) -->2<!-- /generated:a -->\n", blocks); err == nil || !strings.Contains(err.Error(), "not of the form") {
		t.Errorf("Update with a malformed opening marker: err = %v", err)
	}
	readme = "<!-- generated:a (make docs; from x) -->2<!-- /generated:a -->\n"
	got, err := Update(readme, blocks)
	if err != nil || got != "<!-- generated:a (make docs; from x) -->1<!-- /generated:a -->\n" {
		t.Errorf("Update = %q, %v", got, err)
	}
}

// renderFixture renders the sitting table and the default job's blocks of a
// fixture docs folder (the engine benchmark's files are tested apart).
func renderFixture(dir string) ([]Block, error) {
	tab, err := LoadSittingTable(dir)
	if err != nil {
		return nil, err
	}
	dj, err := defaultJobBlocks(dir)
	if err != nil {
		return nil, err
	}
	return append(tab.Blocks(), dj...), nil
}

// TestEngineBlocks renders the engine and round tables from numbers whose
// ratios are worked out by hand: 6/4 = 1.5, 5.5/5 = 1.1, 30/4 = 7.5,
// 55/5 = 11.0, 10/4 = 2.5, 10/5 = 2.0, 48/4 = 12.0, 100/5 = 20.0; rounds
// 1000/100 = 10.0 and 1000/50 = 20.0, 5400 s = 1.50 h, 3600 s = 1.00 h.
func TestEngineBlocks(t *testing.T) {
	dir := t.TempDir()
	writeJSON(t, filepath.Join(dir, engineRef), map[string]any{"train_images_per_s": 4.0, "eval_images_per_s": 5.0, "peak_rss_mib": 100.0})
	engine := func(tr, ev, ctr, cev, gflops, rss float64) map[string]any {
		return map[string]any{"train_images_per_s_online": tr, "eval_images_per_s_online": ev, "train_images_per_s_cached": ctr,
			"eval_images_per_s_cached": cev, "train_online_spread": 0.03, "eval_online_spread": 0.02, "train_cached_spread": 0.01,
			"eval_cached_spread": 0.05, "gemm_gflops": gflops, "peak_rss_mib": rss,
			"reference_train_images_per_s": 4.0, "reference_eval_images_per_s": 5.0}
	}
	writeJSON(t, filepath.Join(dir, engineFP32), engine(6, 5.5, 30, 55, 200, 2000))
	writeJSON(t, filepath.Join(dir, engineBF16), engine(10, 10, 48, 100, 350, 3000))
	round := func(sec, tr, ev, fill, proj float64) map[string]any {
		return map[string]any{"seconds_per_round": sec, "train_seconds_per_round": tr, "eval_seconds_per_round": ev,
			"reference_seconds_per_round": 1000.0, "speedup_per_round": 1000 / sec, "cache_fill_seconds": fill,
			"gflop_per_round": 18300.0, "projected_50_rounds_seconds": proj}
	}
	writeJSON(t, filepath.Join(dir, roundFP32), round(100, 25, 75, 120, 5400))
	writeJSON(t, filepath.Join(dir, roundBF16), round(50, 20, 30, 60, 3600))
	blocks, err := engineBlocks(dir)
	if err != nil {
		t.Fatal(err)
	}
	table := body(t, blocks, "engine-table")
	for _, want := range []string{
		"| training, online augmentation (like for like) | 6.00 images/s ±3% (**1.5×**) | 10.00 images/s ±3% (**2.5×**) | 4.000 images/s |",
		"| *what pfedmma adds:* evaluation, cached records | 55.00 images/s ±5% (**11.0×**) | 100.00 images/s ±5% (**20.0×**) | 5.000 images/s |",
		"| peak RSS | 2000 MiB | 3000 MiB | 100 MiB |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("engine table lacks %q:\n%s", want, table)
		}
	}
	if got := body(t, blocks, "engine-headline"); !strings.Contains(got, "**7.5× the authors' training and 11.0× their evaluation in exact fp32, 12.0× / 20.0× in bf16**: the 6× / 10× targets hold.") {
		t.Errorf("engine headline = %q", got)
	}
	rt := body(t, blocks, "round-table")
	for _, want := range []string{"| 100.0 (25.0 + 75.0) | 50.0 (20.0 + 30.0) |", "authors' 1,000 s per round** | **10.0×** | **20.0×** |", "| 1.50 h | 1.00 h |", "| 18.3 TFLOP |"} {
		if !strings.Contains(rt, want) {
			t.Errorf("round table lacks %q:\n%s", want, rt)
		}
	}
	writeJSON(t, filepath.Join(dir, engineBF16), map[string]any{"train_images_per_s_online": 1.0})
	if _, err := engineBlocks(dir); err == nil || !strings.Contains(err.Error(), "train-bf16.json") {
		t.Errorf("engine blocks from an incomplete file: err = %v, want one naming it", err)
	}
}

// TestRunBlock quotes one run with its ratio to its own sitting's authors'
// run (10/4 = 2.5, 20/5 = 4.0), and refuses a run whose sitting has no
// authors' file for its method.
func TestRunBlock(t *testing.T) {
	dir := fixtureDocs(t)
	b, err := RunBlock(dir, "1/m-fp32.json")
	if err != nil {
		t.Fatal(err)
	}
	if b.Name != "run-1-m-fp32" || b.Body != "10.00 / 20.00 images/s, **2.5×** / **4.0×** (sitting 1 vs 1)" {
		t.Errorf("RunBlock = %q %q", b.Name, b.Body)
	}
	if _, err := RunBlock(dir, "2/m-fp32-uncached.json"); err == nil || !strings.Contains(err.Error(), "m-ref.json") {
		t.Errorf("RunBlock without a same-sitting reference: err = %v", err)
	}
}

// TestRows rewrites a row found by its first cells, keeping its indentation,
// and refuses a prefix found twice or nowhere.
func TestRows(t *testing.T) {
	dir := t.TempDir()
	writeJSON(t, filepath.Join(dir, "compress", "clip_lora-none", "summary.json"), map[string]any{
		"metrics": []string{"local", "base", "novel", "hm"}, "compress": "none",
		"methods":                         map[string]any{"clip_lora": map[string]any{"local": 93.828125, "base": 66.25, "novel": 77.4765625, "hm": 77.601}},
		"update_bytes_per_round_per_site": map[string]any{"clip_lora": 49152}, "download_bytes_per_round_per_site": map[string]any{"clip_lora": 1234567},
	})
	rows := []Row{}
	all, err := RenderRows(dir)
	if err == nil {
		t.Fatalf("RenderRows without the fp16 and int8 summaries: no error (%d rows)", len(all))
	}
	if !strings.Contains(err.Error(), compressRuns[0].dir) {
		t.Errorf("RenderRows error %v does not name the missing summary %s", err, compressRuns[0].dir)
	}
	methodsOf := map[string][]string{}
	for _, run := range compressRuns {
		if run.dir != "clip_lora-none" && !slices.Contains(methodsOf[run.dir], run.method) {
			methodsOf[run.dir] = append(methodsOf[run.dir], run.method)
		}
	}
	for d, ms := range methodsOf {
		c := d[strings.LastIndex(d, "-")+1:]
		methods, up, down := map[string]any{}, map[string]any{}, map[string]any{}
		for _, m := range ms {
			methods[m] = map[string]any{"local": 1.0, "base": 2.0, "novel": 3.0, "hm": 4.0}
			up[m], down[m] = 5, 6
		}
		writeJSON(t, filepath.Join(dir, "compress", d, "summary.json"), map[string]any{
			"metrics": []string{"local", "base", "novel", "hm"}, "compress": c,
			"methods": methods, "update_bytes_per_round_per_site": up, "download_bytes_per_round_per_site": down,
		})
	}
	all, err = RenderRows(dir)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(all, func(r Row) bool { return r.Prefix == "| `clip_lora` | none |" })
	if i < 0 {
		t.Fatalf("RenderRows gives no clip_lora none row: %q", all)
	}
	rows = append(rows, all[i])
	if want := "| `clip_lora` | none | 49,152 | 1,234,567 | 93.83 | 66.25 | 77.48 | 77.60 |"; all[i].Text != want {
		t.Fatalf("RenderRows' clip_lora none row = %q, want %q", all[i].Text, want)
	}
	readme := "a\n  | `clip_lora` | none | 1 | 2 | 94.30 | 65.52 | 77.28 | 77.31 |\n  | `clip_lora` | fp16 | 1 |\n"
	got, err := UpdateRows(readme, rows)
	want := "a\n  | `clip_lora` | none | 49,152 | 1,234,567 | 93.83 | 66.25 | 77.48 | 77.60 |\n  | `clip_lora` | fp16 | 1 |\n"
	if err != nil || got != want {
		t.Errorf("UpdateRows = %q, %v; want %q", got, err, want)
	}
	if d, err := DiffRows(readme, rows); err != nil || len(d) != 1 {
		t.Errorf("DiffRows on the stale row = %q, %v", d, err)
	}
	if d, err := DiffRows(want, rows); err != nil || len(d) != 0 {
		t.Errorf("DiffRows on the updated row = %q, %v", d, err)
	}
	if _, err := UpdateRows(readme+readme, rows); err == nil {
		t.Error("UpdateRows with the row twice: no error")
	}
	if _, err := UpdateRows("a\n", rows); err == nil {
		t.Error("UpdateRows without the row: no error")
	}
}

// TestFullBackpropBlock renders the fp32 → bf16 table against the text
// written out by hand, in the README's method order.
func TestFullBackpropBlock(t *testing.T) {
	dir := t.TempDir()
	for i, p := range []string{"fp32", "bf16"} {
		methods := map[string]any{}
		for j, m := range []string{"fedmvp", "maple", "adapt", "clip_lora"} {
			methods[m] = map[string]any{"local": 90.0 + float64(j) + float64(i)/4, "hm": 80.0 - float64(j)}
		}
		writeJSON(t, filepath.Join(dir, FullBackpropDir, p, "summary.json"), map[string]any{"metrics": []string{"local", "hm"}, "methods": methods})
	}
	blocks, err := fullBackpropBlocks(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := "\n```\n" +
		"             local          hm\n" +
		"clip_lora    93.00 → 93.25  77.00 → 77.00\n" +
		"adapt        92.00 → 92.25  78.00 → 78.00\n" +
		"maple        91.00 → 91.25  79.00 → 79.00\n" +
		"fedmvp       90.00 → 90.25  80.00 → 80.00\n" +
		"```\n"
	if got := body(t, blocks, "fullbackprop-bf16"); got != want {
		t.Errorf("fullbackprop-bf16 =\n%s\nwant\n%s", got, want)
	}
	if got := body(t, blocks, "fullbackprop-local-diff"); got != "The largest Local difference in these runs is 0.25 points (clip_lora), within the guard's 1.1." {
		t.Errorf("fullbackprop-local-diff = %q", got)
	}
	if got := body(t, blocks, "fedmvp-local-bf16"); got != "90.00 → 90.25" {
		t.Errorf("fedmvp-local-bf16 = %q", got)
	}
}

// TestSettingsBlock renders FedOTP's settings table and compares rows with
// the text written out by hand from methods/fedotp/method.go and its
// DefaultConfig (ε 0.01, ot COT, lr unset sharing its doc with
// local_epochs), and a method without settings.
func TestSettingsBlock(t *testing.T) {
	m, err := methods.Get("fedotp")
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := SettingsBlocks("../..", []MethodSettings{{Name: "fedotp", Defaults: m.DefaultConfig()}, {Name: "zeroshot"}})
	if err != nil {
		t.Fatal(err)
	}
	got := body(t, blocks, "settings-fedotp")
	const doc = "LR and LocalEpochs, when set, replace the run's optimizer.lr and federation.local_epochs for this method; 0 keeps the run's."
	for _, want := range []string{
		"\n| key | default | meaning |\n|---|---|---|\n| `fedotp.n_ctx` | `16` | context tokens per prompt (16) |\n",
		"| `fedotp.ot` | `COT` | COT (unbalanced, default) or Sinkhorn |\n| `fedotp.eps` | `0.01` | entropic regularisation ε > 0 (0.01) |\n",
		"| `fedotp.class_token_position` | `end` | ClassTokenPosition is CoOp's class_token_position of every prompt: end (default), middle or front. |\n",
		"| `fedotp.lr` | `0` | " + doc + " |\n| `fedotp.local_epochs` | `0` | " + doc + " |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("settings-fedotp lacks\n%s\nin\n%s", want, got)
		}
	}
	if got := body(t, blocks, "settings-zeroshot"); got != "`zeroshot` has no settings of its own." {
		t.Errorf("settings-zeroshot = %q", got)
	}
	if _, err := SettingsBlocks("../..", []MethodSettings{{Name: "x", Defaults: &Block{}}}); err == nil || !strings.Contains(err.Error(), `yaml tag "name"`) {
		t.Errorf("settings of a type with no yaml section: err = %v", err)
	}
}

// TestFigureFollowsEvidence: a figure (a number of the prose, block fig-…)
// renders the value its marker names, formatted as it says (a signed one
// with the minus sign), and DiffFiles names the file and the figure when
// the evidence changes under it or the number is edited by hand; a key the
// evidence lacks is an error naming the file and the key.
func TestFigureFollowsEvidence(t *testing.T) {
	root := t.TempDir()
	ev := filepath.Join(root, "docs", "x", "summary.json")
	writeJSON(t, ev, map[string]any{"methods": map[string]any{"pfedmma": map[string]any{"avg": 78.8993}}, "d": []any{-0.4092}, "top1": 0.53125})
	pct := []File{{Path: "p.md", Text: "<!-- generated:fig-p (make docs; from docs/x/summary.json top1 100*%.1f) -->?<!-- /generated:fig-p -->"}}
	if b, err := FigureBlocks(root, pct); err != nil || body(t, b, "fig-p") != "53.1" {
		t.Errorf("a fraction in percent: %v %v, want 53.1", b, err)
	}
	md := "Avg <!-- generated:fig-a (make docs; from docs/x/summary.json methods.pfedmma.avg %.1f) -->?<!-- /generated:fig-a -->, " +
		"diff <!-- generated:fig-d (make docs; from docs/x/summary.json d.0 %+.2f) -->?<!-- /generated:fig-d -->, " +
		"gap <!-- generated:fig-g (make docs; from docs/x/summary.json methods.pfedmma.avg - d.0 %.1f) -->?<!-- /generated:fig-g -->.\n"
	files := []File{{Path: "doc.md", Text: md}}
	blocks, err := FigureBlocks(root, files)
	if err != nil {
		t.Fatal(err)
	}
	if got := body(t, blocks, "fig-a") + " " + body(t, blocks, "fig-d") + " " + body(t, blocks, "fig-g"); got != "78.9 −0.41 79.3" {
		t.Errorf("figures %q, want \"78.9 −0.41 79.3\" (78.8993 + 0.4092 = 79.3085)", got)
	}
	out, err := UpdateFiles(files, blocks, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := DiffFiles(out, blocks, nil); err != nil || len(d) > 0 {
		t.Fatalf("rendered file differs from its evidence: %v %v", d, err)
	}
	// the evidence changes; the doc does not
	writeJSON(t, ev, map[string]any{"methods": map[string]any{"pfedmma": map[string]any{"avg": 79.3}}, "d": []any{-0.4092}})
	if blocks, err = FigureBlocks(root, out); err != nil {
		t.Fatal(err)
	}
	d, err := DiffFiles(out, blocks, nil)
	if err != nil || len(d) != 2 || !strings.Contains(d[0], "doc.md") || !strings.Contains(d[0], `"fig-a"`) || !strings.Contains(d[1], `"fig-g"`) {
		t.Errorf("changed evidence: diffs %v (%v), want two naming doc.md, fig-a and fig-g (the difference)", d, err)
	}
	// a hand edit
	edited := []File{{Path: "doc.md", Text: strings.Replace(out[0].Text, "−0.41", "−0.40", 1)}}
	if d, _ := DiffFiles(edited, blocks, nil); len(d) != 3 {
		t.Errorf("hand edit and changed evidence (fig-a, fig-g; fig-d): diffs %v, want 3", d)
	}
	bad := []File{{Path: "doc.md", Text: strings.Replace(md, "methods.pfedmma.avg", "methods.pfedmma.hm", 1)}}
	if _, err := FigureBlocks(root, bad); err == nil || !strings.Contains(err.Error(), "methods.pfedmma.hm") || !strings.Contains(err.Error(), "summary.json") {
		t.Errorf("a missing key: error %v, want one naming the file and the key", err)
	}
}

// TestRunTable: a run table (block table-…) is what `pfedmma run` prints
// for the summary.json its marker names, in the summary's method order.
func TestRunTable(t *testing.T) {
	root := t.TempDir()
	writeJSON(t, filepath.Join(root, "docs", "r", "summary.json"), map[string]any{
		"protocol": "base2novel", "metrics": []string{"local", "hm"},
		"methods": map[string]any{"zeroshot": map[string]any{"local": 74.21875, "hm": 77.7316}, "pfedmma": map[string]any{"local": 90.9375, "hm": 80.693}},
	})
	md := "<!-- generated:table-r (make docs; from docs/r/summary.json) -->\n<!-- /generated:table-r -->\n"
	blocks, err := FigureBlocks(root, []File{{Path: "doc.md", Text: md}})
	if err != nil {
		t.Fatal(err)
	}
	want := "\n```\n" +
		"Method    Local     HM\n" +
		"--------  -----  -----\n" +
		"pfedmma   90.94  80.69\n" +
		"zeroshot  74.22  77.73\n" +
		"```\n"
	if got := body(t, blocks, "table-r"); got != want {
		t.Errorf("table-r =\n%s\nwant\n%s", got, want)
	}
}

// TestRunTableMerged: a run table over a stopped run's metrics.jsonl and a
// finished run's summary.json lists the methods in the files' order, each
// method's last record from the stopped run unless the finished run's
// summary holds it (b below: its round-0 record in the stopped run is not
// its result).
func TestRunTableMerged(t *testing.T) {
	root := t.TempDir()
	rec := func(round int, method string, local, hm float64) string {
		b, _ := json.Marshal(map[string]any{"round": round, "method": method, "mean": map[string]float64{"local": local, "hm": hm, "loss": 1}})
		return string(b) + "\n"
	}
	jsonl := rec(0, "zeroshot", 74.2, 77.7) + rec(0, "a", 80, 81) + rec(1, "a", 90, 82) + rec(0, "b", 50, 50)
	if err := os.MkdirAll(filepath.Join(root, "docs", "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "docs", "a", "metrics.jsonl"), []byte(jsonl), 0o644); err != nil {
		t.Fatal(err)
	}
	writeJSON(t, filepath.Join(root, "docs", "b", "summary.json"), map[string]any{
		"protocol": "base2novel", "metrics": []string{"local", "hm"},
		"methods": map[string]any{"b": map[string]any{"local": 85, "hm": 83}, "c": map[string]any{"local": 70, "hm": 71}, "zeroshot": map[string]any{"local": 74.2, "hm": 77.7}},
	})
	md := "<!-- generated:table-m (make docs; from docs/a/metrics.jsonl docs/b/summary.json) -->\n<!-- /generated:table-m -->\n"
	blocks, err := FigureBlocks(root, []File{{Path: "doc.md", Text: md}})
	if err != nil {
		t.Fatal(err)
	}
	want := "\n```\n" +
		"Method    Local     HM\n" +
		"--------  -----  -----\n" +
		"zeroshot  74.20  77.70\n" +
		"a         90.00  82.00\n" +
		"b         85.00  83.00\n" +
		"c         70.00  71.00\n" +
		"```\n"
	if got := body(t, blocks, "table-m"); got != want {
		t.Errorf("table-m =\n%s\nwant\n%s", got, want)
	}
}
