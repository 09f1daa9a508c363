package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
)

// stFile is a safetensors file's tensors and metadata, to edit in tests.
type stFile struct {
	f32  tensor.Named
	ints map[string]safetensors.Int64Tensor
	meta map[string]string
}

// readST reads every tensor of a safetensors file.
func readST(t *testing.T, path string) stFile {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := stFile{f32: tensor.Named{}, ints: map[string]safetensors.Int64Tensor{}, meta: f.Metadata()}
	if out.meta == nil {
		out.meta = map[string]string{}
	}
	for _, name := range f.Names() {
		dt, _, _ := f.Info(name)
		if dt == "I64" || dt == "I32" {
			v, shape, err := f.Int64(name)
			if err != nil {
				t.Fatal(err)
			}
			out.ints[name] = safetensors.Int64Tensor{Shape: shape, Data: v}
			continue
		}
		v, err := f.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		out.f32[name] = v
	}
	return out
}

// write writes s to dir/name and returns the path.
func (s stFile) write(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := safetensors.Write(p, s.f32, s.ints, s.meta); err != nil {
		t.Fatal(err)
	}
	return p
}

// assertRefused checks that err is an error holding every want (and no
// Go panic text), and that out was not written.
func assertRefused(t *testing.T, what string, err error, out string, want ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: accepted, want an error naming %q", what, want)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: error %q does not name %q", what, err, w)
		}
	}
	if out != "" {
		if _, statErr := os.Stat(out); statErr == nil {
			t.Errorf("%s: %s was written although the command failed", what, out)
		}
	}
}

// TestStepRoundRefuseSilentResults: step and round refuse non-finite
// parameters, images and hyper-parameters, outputs that diverge, unknown
// --set keys, empty batches, float labels and client indices with a gap —
// each naming the tensor, key or file — and write nothing (before: NaN
// outputs and exit 0, an ignored key, a dropped client, a slice-bounds
// panic, "labels missing").
func TestStepRoundRefuseSilentResults(t *testing.T) {
	t.Cleanup(func() { resetCommand(t, "step"); resetCommand(t, "round") })
	const td = "../../testdata/"
	dir := t.TempDir()
	model := td + "clip-tiny/openai.safetensors"
	initP, stepP, roundP := td+"mma-l2/adapters_init.safetensors", td+"mma-l2/step.safetensors", td+"mma-l2/round.safetensors"

	nanParams := readST(t, initP)
	const pname = "adapter_learner.shared_adapter.2.0.bias"
	nanParams.f32[pname].Data[3] = float32(math.NaN())
	nanParamsP := nanParams.write(t, dir, "nan_params.safetensors")

	nanImages := readST(t, stepP)
	nanImages.f32["images"].Data[7] = float32(math.Inf(1))
	nanImagesP := nanImages.write(t, dir, "nan_images.safetensors")

	empty := readST(t, stepP)
	empty.f32["images"] = tensor.New(0, 3, 32, 32)
	empty.ints["labels"] = safetensors.Int64Tensor{Shape: []int{0}, Data: []int64{}}
	emptyP := empty.write(t, dir, "empty.safetensors")

	noTokens := readST(t, stepP)
	noTokens.ints["tokens"] = safetensors.Int64Tensor{Shape: []int{0, 77}, Data: []int64{}}
	noTokensP := noTokens.write(t, dir, "no_tokens.safetensors")
	cutTokens := readST(t, stepP)
	cutTokens.ints["tokens"] = safetensors.Int64Tensor{Shape: []int{5, 76}, Data: cutTokens.ints["tokens"].Data[:5*76]}
	cutTokensP := cutTokens.write(t, dir, "cut_tokens.safetensors")

	floatLabels := readST(t, stepP)
	lab := floatLabels.ints["labels"]
	fl := tensor.New(len(lab.Data))
	for i, v := range lab.Data {
		fl.Data[i] = float32(v)
	}
	delete(floatLabels.ints, "labels")
	floatLabels.f32["labels"] = fl
	floatLabelsP := floatLabels.write(t, dir, "float_labels.safetensors")

	gap := readST(t, roundP)
	for _, m := range []map[string]*tensor.Tensor{gap.f32} {
		for name, v := range m {
			if strings.HasPrefix(name, "client1.") {
				delete(m, name)
				m["client2."+strings.TrimPrefix(name, "client1.")] = v
			}
		}
	}
	for name, v := range gap.ints {
		if strings.HasPrefix(name, "client1.") {
			delete(gap.ints, name)
			gap.ints["client2."+strings.TrimPrefix(name, "client1.")] = v
		}
	}
	gapP := gap.write(t, dir, "gap.safetensors")

	for _, c := range []struct {
		name, kind, params string
		batches, sets      []string
		want               []string
	}{
		{"nan parameter", "step", nanParamsP, []string{stepP}, nil, []string{"nan_params.safetensors", pname, "NaN"}},
		{"inf image", "step", initP, []string{nanImagesP}, nil, []string{"nan_images.safetensors", `"images"`, "+Inf"}},
		{"lr=nan", "step", initP, []string{stepP}, []string{"lr=nan"}, []string{"lr=nan", "finite"}},
		{"adapter_scale=inf", "step", initP, []string{stepP}, []string{"adapter_scale=inf"}, []string{"adapter_scale=inf", "finite"}},
		{"round momentum=NaN", "round", initP, []string{roundP, stepP}, []string{"momentum=NaN"}, []string{"momentum=NaN"}},
		{"diverging output", "step", initP, []string{stepP}, []string{"adapter_scale=1e38"}, []string{"output", "grad.", "diverge"}},
		{"unknown --set key", "step", initP, []string{stepP}, []string{"unknown_key=3"}, []string{`"unknown_key"`, "adapter_scale", "lr"}},
		{"empty batch", "step", initP, []string{emptyP}, nil, []string{`"images"`, "empty"}},
		{"empty tokens", "step", initP, []string{noTokensP}, nil, []string{`"tokens"`, "empty"}},
		{"tokens not whole rows", "step", initP, []string{cutTokensP}, nil, []string{`"tokens"`, "380", "77"}},
		{"float labels", "step", initP, []string{floatLabelsP}, nil, []string{`"labels"`, "float", "I64"}},
		{"client gap", "round", initP, []string{gapP, stepP}, nil, []string{"client2", "client1", "gap"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out.safetensors")
			args := []string{c.kind, "--method", "pfedmma", "--model", model, "--params", c.params, "--out", out}
			for _, b := range c.batches {
				args = append(args, "--batch", b)
			}
			for _, s := range c.sets {
				args = append(args, "--set", s)
			}
			_, err := execute(t, args...)
			assertRefused(t, c.name, err, out, c.want...)
		})
	}
	// the same inputs, unedited, still work, and a --set of a key the file
	// already holds is accepted
	out := filepath.Join(dir, "ok.safetensors")
	if _, err := execute(t, "step", "--method", "pfedmma", "--model", model, "--params", initP, "--batch", stepP,
		"--set", "adapter_scale=0.01", "--out", out); err != nil {
		t.Fatal(err)
	}
}

// goIdentInError matches an error string naming a Go field (Options.X,
// Config.X) or a CamelCase identifier followed by its value ("Size 7 not
// in", "RecordLen = 3", "PretrainDomains[2] = 9").
var goIdentInError = regexp.MustCompile(`(Errorf|errors\.New)\("[^"]*(\b(Options|Config|Settings|Opts)\.[A-Z]|\b[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*(\[%d\])? ?(=|%|not in)|\bSize %d)`)

// TestErrorsSpeakUserVocabulary: no error message of the program names a
// Go field where the user wrote a config key, a flag or a file (before:
// "Size 7 not in [8, 1024]", "Options.SpillDir", gating_embed_dim for
// pfedmoap.gate_width).
func TestErrorsSpeakUserVocabulary(t *testing.T) {
	root := "../.."
	n := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "shared" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n++
		for i, line := range strings.Split(string(b), "\n") {
			if m := goIdentInError.FindString(line); m != "" {
				t.Errorf("%s:%d: error message names a Go identifier: %s", path, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 50 {
		t.Fatalf("only %d Go files scanned under %s", n, root)
	}
	for _, msg := range []string{`fmt.Errorf("world: Size %d not in [8, 1024]: %w"`, `fmt.Errorf("actcache: Options.SpillDir %q: %w"`} {
		if !goIdentInError.MatchString(msg) {
			t.Errorf("the check misses %s", msg)
		}
	}
}

// editRunJSON rewrites dir/run.json through edit (on its generic JSON form).
func editRunJSON(t *testing.T, dir string, orig []byte, edit func(m map[string]any)) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(orig, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "run.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPredictValidatesRunJSON: predict refuses a hand-edited or damaged
// run.json naming the file and the field (before: an index out of range
// panic for a class index beyond the classes, uniform 5% predictions for a
// missing template, a site folder outside the run read as it was).
func TestPredictValidatesRunJSON(t *testing.T) {
	model := tinyWorldModel(t)
	out := filepath.Join(t.TempDir(), "run")
	if _, err := execute(t, tinyRunArgs(model, out, 1)...); err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(filepath.Join(out, "run.json"))
	if err != nil {
		t.Fatal(err)
	}
	img := writeWorldImage(t, 0)
	for _, c := range []struct {
		name string
		edit func(m map[string]any)
		raw  string
		want []string
	}{
		{"class index out of range", func(m map[string]any) {
			m["spaces"].([]any)[0].(map[string]any)["classes"] = []any{0, 1, 2, 99}
		}, "", []string{`"spaces"`, "99"}},
		{"negative class index", func(m map[string]any) {
			m["spaces"].([]any)[0].(map[string]any)["classes"] = []any{-1}
		}, "", []string{`"spaces"`, "-1"}},
		{"template missing", func(m map[string]any) { delete(m, "template") }, "", []string{`"template"`, "{}"}},
		{"template without slot", func(m map[string]any) { m["template"] = "a photo." }, "", []string{`"template"`}},
		{"client space out of range", func(m map[string]any) { m["client_space"] = map[string]any{"0": 0, "1": 7} }, "", []string{`"client_space"`, "client 1"}},
		{"client gap", func(m map[string]any) { m["client_space"] = map[string]any{"0": 0, "2": 0} }, "", []string{`"client_space"`, "client 1"}},
		{"no classes", func(m map[string]any) { m["classes"] = []any{} }, "", []string{`"classes"`}},
		{"unknown protocol", func(m map[string]any) { m["protocol"] = "base2nvel" }, "", []string{`"protocol"`, "base2nvel"}},
		{"unknown method", func(m map[string]any) {
			m["methods"] = []any{"zeroshot", "pfedmma", "pfedmmx"}
			m["sites"].(map[string]any)["pfedmmx"] = "sites/x"
		}, "", []string{`"methods"`, "pfedmmx"}},
		{"duplicate class", func(m map[string]any) { c := m["classes"].([]any); c[1] = c[0] }, "", []string{`"classes"`, "twice"}},
		{"site escapes the run", func(m map[string]any) { m["sites"].(map[string]any)["pfedmma"] = "../../etc" }, "", []string{`"sites"`, "../../etc"}},
		{"unknown field", func(m map[string]any) { m["clases"] = []any{"x"} }, "", []string{"clases"}},
		{"wrong type", func(m map[string]any) { m["classes"] = "cat" }, "", []string{`"classes"`, "string"}},
		{"bad section value", func(m map[string]any) {
			m["sections"].(map[string]any)["pfedmma"] = "dim: -5\n"
		}, "", []string{"sections", "pfedmma.dim"}},
		{"unknown section key", func(m map[string]any) {
			m["sections"].(map[string]any)["pfedmma"] = "dimm: 8\n"
		}, "", []string{"sections", "dimm"}},
		{"truncated", nil, string(orig[:len(orig)/2]), []string{"truncated"}},
		{"not JSON", nil, "model: x\n", []string{"JSON"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.edit != nil {
				editRunJSON(t, out, orig, c.edit)
			} else if err := os.WriteFile(filepath.Join(out, "run.json"), []byte(c.raw), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := execute(t, "predict", "--run", out, "--image", img)
			assertRefused(t, c.name, err, "", append(c.want, "run.json")...)
		})
	}
	if err := os.WriteFile(filepath.Join(out, "run.json"), orig, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := execute(t, "predict", "--run", out, "--image", img); err != nil {
		t.Fatalf("the unedited run.json: %v", err)
	}
}

// TestZeroshotTopZero: zeroshot --top 0 (or negative) is refused naming
// the flag (before: it printed nothing and exited 0).
func TestZeroshotTopZero(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	img := writeWorldImage(t, 0)
	for _, top := range []string{"0", "-3"} {
		_, err := execute(t, "zeroshot", "--classes", "cat,dog", "--top", top, "--image", img)
		assertRefused(t, "--top "+top, err, "", "--top", top)
	}
	out, err := execute(t, "zeroshot", "--classes", "cat,dog", "--top", "1", "--image", img)
	if err != nil || strings.Count(out, "%") != 1 {
		t.Errorf("--top 1: %v\n%s", err, out)
	}
}

// TestSiteDataChecked: site --data is checked whatever the dataset: a
// missing folder, a file, and a folder given for the generated world are
// refused naming --data, before any connection is tried (before: under
// the world dataset a missing folder was ignored and the site trained on
// generated data). A site without experiment flags learns the dataset from
// the coordinator's task; with them (here --preset world-deploy) a folder
// for the generated world is refused before connecting.
func TestSiteDataChecked(t *testing.T) {
	file := filepath.Join(t.TempDir(), "data.txt")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		data, want string
		flags      []string
	}{
		{"/nonexistent/pfedmma-data", "no such file", nil},
		{file, "not a folder", nil},
		{t.TempDir(), "world", []string{"--preset", "world-deploy"}},
	} {
		done := make(chan error, 1)
		go func() {
			_, err := execute(t, append([]string{"site", "--server", "127.0.0.1:1", "--name", "a", "--insecure-dev", "--data", c.data,
				"--state", filepath.Join(t.TempDir(), "state")}, c.flags...)...)
			done <- err
		}()
		select {
		case err := <-done:
			assertRefused(t, "--data "+c.data, err, "", "--data", c.data, c.want)
		case <-time.After(20 * time.Second):
			t.Fatalf("site --data %s was not refused (it went on to connect)", c.data)
		}
	}
}

// writeRunResults writes a run folder holding only summary.json and
// metrics.jsonl (what report reads).
func writeRunResults(t *testing.T, summary, metrics string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), []byte(summary), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte(metrics), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestReportRefusesCorruptMetrics: report refuses metrics it cannot draw
// truthfully, naming the file (and the line): accuracies out of [0, 100],
// negative or repeated rounds, a truncated last line (before: dropped, so
// the method's curve vanished while its table row stayed), a summary method
// without a curve, unknown fields; the intact files are drawn.
func TestReportRefusesCorruptMetrics(t *testing.T) {
	const summary = `{"protocol": "base2novel", "metrics": ["local", "base", "novel", "hm"],
 "methods": {"zeroshot": {"local": 60, "base": 60, "novel": 60, "hm": 60}, "pfedmma": {"local": 90, "base": 70, "novel": 65, "hm": 74}}}`
	line := func(method string, round int, local string) string {
		return fmt.Sprintf(`{"round":%d,"method":%q,"mean":{"local":%s,"base":60,"novel":60,"hm":60},"clients":[{"id":0,"metrics":{"local":%s,"base":60,"novel":60,"hm":60}}]}`+"\n", round, method, local, local)
	}
	good := line("zeroshot", 0, "60") + line("pfedmma", 0, "80") + line("pfedmma", 1, "90")
	for _, c := range []struct {
		name, summary, metrics string
		want                   []string
	}{
		{"accuracy 1e308", summary, line("zeroshot", 0, "60") + line("pfedmma", 0, "1e308"), []string{"metrics.jsonl", "line 2", "local", "1e+308"}},
		{"accuracy -1e9 in a client", summary, good + line("pfedmma", 2, "-1e9"), []string{"metrics.jsonl", "line 4", "-1e+09"}},
		{"summary accuracy 1e308", strings.Replace(summary, `"local": 90`, `"local": 1e308`, 1), good, []string{"summary.json", "pfedmma", "1e+308"}},
		{"summary accuracy -1e9", strings.Replace(summary, `"hm": 74`, `"hm": -1e9`, 1), good, []string{"summary.json", "hm"}},
		{"round -5", summary, good + line("pfedmma", -5, "90"), []string{"metrics.jsonl", "line 4", "-5"}},
		{"repeated round", summary, good + line("pfedmma", 1, "90"), []string{"metrics.jsonl", "line 4", "round 1"}},
		{"truncated last line", summary, good + line("pfedmma", 2, "91")[:40], []string{"metrics.jsonl", "line 4", "truncated"}},
		{"method without a curve", summary, line("zeroshot", 0, "60") + line("pfedmma", 0, "80")[:50], []string{"metrics.jsonl", "line 2", "truncated"}},
		{"summary method missing from metrics", summary, line("zeroshot", 0, "60"), []string{"summary.json", "pfedmma", "metrics.jsonl"}},
		{"unknown field", summary, good + `{"round":3,"method":"pfedmma","mean":{"local":1},"acc":5}` + "\n", []string{"metrics.jsonl", "line 4", "acc"}},
		{"garbage line", summary, good[:len(good)/2] + "\nxx\n" + good[len(good)/2:], []string{"metrics.jsonl", "line"}},
		{"summary not JSON", "{", good, []string{"summary.json"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writeRunResults(t, c.summary, c.metrics)
			_, err := execute(t, "report", dir)
			assertRefused(t, c.name, err, filepath.Join(dir, "curves.png"), c.want...)
		})
	}
	dir := writeRunResults(t, summary, good)
	if out, err := execute(t, "report", dir); err != nil || !strings.Contains(out, "pfedmma") {
		t.Fatalf("intact files: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "curves.png")); err != nil {
		t.Errorf("intact files: no curves drawn: %v", err)
	}
}

// TestPredictBlamesSiteFile: a site file lacking a tensor its method loads
// only when it scores (FedPGP's prompt_learner.U) is named as the culprit,
// not the image (before: "predict: IMAGE.png: parameter ... is missing").
func TestPredictBlamesSiteFile(t *testing.T) {
	model := tinyWorldModel(t)
	out := filepath.Join(t.TempDir(), "run")
	if _, err := execute(t, append(tinyRunArgs(model, out, 1), "--set", "methods=[fedpgp]")...); err != nil {
		t.Fatal(err)
	}
	site := filepath.Join(out, "sites", "fedpgp", "client_000.safetensors")
	f := readST(t, site)
	if _, ok := f.f32["prompt_learner.U"]; !ok {
		t.Fatalf("%s holds no prompt_learner.U: %v", site, f.f32)
	}
	delete(f.f32, "prompt_learner.U")
	if err := os.Remove(site); err != nil {
		t.Fatal(err)
	}
	f.write(t, filepath.Dir(site), filepath.Base(site))
	img := writeWorldImage(t, 0)
	_, err := execute(t, "predict", "--run", out, "--image", img)
	assertRefused(t, "site file without prompt_learner.U", err, "", site, "prompt_learner.U")
	if err != nil && strings.Contains(err.Error(), img) {
		t.Errorf("the error blames the image: %v", err)
	}
}

// TestOutFolderRefused: preprocess and step given a folder as --out are
// refused naming --out and the folder, before any work (before: "rename
// …: file exists").
func TestOutFolderRefused(t *testing.T) {
	t.Cleanup(func() { resetCommand(t, "step") })
	dir := t.TempDir()
	img := writeWorldImage(t, 0)
	_, err := execute(t, "preprocess", "--image", img, "--out", dir)
	assertRefused(t, "preprocess --out FOLDER", err, "", "--out", dir, "folder")
	const td = "../../testdata/"
	_, err = execute(t, "step", "--method", "pfedmma", "--model", td+"clip-tiny/openai.safetensors",
		"--params", td+"mma-l2/adapters_init.safetensors", "--batch", td+"mma-l2/step.safetensors", "--out", dir)
	assertRefused(t, "step --out FOLDER", err, "", "--out", dir, "folder")
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("%s: %d entries left behind", dir, len(entries))
	}
}

// TestDefaultRunFolder: without --out, two runs started in the same second
// get two folders, and a run failing before it wrote anything resumable
// leaves no folder behind (before: the second run failed asking for
// --resume although no --out was given).
func TestDefaultRunFolder(t *testing.T) {
	t.Chdir(t.TempDir())
	model := tinyWorldModel(t)
	for range 2 {
		_, err := execute(t, "run", "--quiet", "--set", "model="+model, "--set", "dataset.image_size=7")
		assertRefused(t, "dataset.image_size=7", err, "", "dataset.image_size")
		if err != nil && strings.Contains(err.Error(), "--resume") {
			t.Errorf("a run without --out asks for --resume: %v", err)
		}
	}
	if entries, _ := os.ReadDir("runs"); len(entries) != 0 {
		t.Errorf("failed runs left %d folders in runs/", len(entries))
	}
	a, err := experiment.NewDefaultRunDir("same")
	if err != nil {
		t.Fatal(err)
	}
	b, err := experiment.NewDefaultRunDir("same")
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Errorf("two runs of one name got one folder %s", a)
	}
	for _, d := range []string{a, b} {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			t.Errorf("folder %s not created: %v", d, err)
		}
	}
}

// badFiles writes the kinds of bad input file the property test feeds to
// every command: random bytes, an empty file, a truncated safetensors file,
// a safetensors header announcing 1 TiB, a tensor pointing beyond its
// file, JSON of the wrong shape, a PNG signature followed by junk, and a
// folder where a file is expected.
func badFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	rng := rand.New(rand.NewPCG(18, 3))
	random := make([]byte, 777)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	valid, err := os.ReadFile("../../testdata/mma-l2/step.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	huge := binary.LittleEndian.AppendUint64(nil, 1<<40)
	hdr := `{"a":{"dtype":"F32","shape":[1000000000],"data_offsets":[0,4000000000]}}`
	beyond := append(binary.LittleEndian.AppendUint64(nil, uint64(len(hdr))), hdr...)
	files := map[string][]byte{
		"random": random, "empty": {}, "truncated": valid[:len(valid)/3], "huge-header": append(huge, '{'),
		"beyond": append(beyond, 1, 2, 3, 4), "json": []byte(`{"x": [1, 2, {"y": null}], "round": "five"}`),
		"png-junk": append([]byte("\x89PNG\r\n\x1a\n"), random[:200]...),
	}
	out := map[string]string{}
	for name, b := range files {
		p := filepath.Join(dir, name+".bad")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		out[name] = p
	}
	out["folder"] = t.TempDir()
	return out
}

// TestEveryCommandRefusesBadFiles is the property test of issue 18: every
// command given a bad file wherever it reads one exits non-zero, within a
// minute, and without a Go panic or fatal error (no "panic:", "fatal
// error:" or goroutine dump on stderr).
func TestEveryCommandRefusesBadFiles(t *testing.T) {
	t.Parallel() // its processes wait (rounds, retries) more than they compute
	bin, tmp := testBinary(t), t.TempDir()
	td, err := filepath.Abs("../../testdata")
	if err != nil {
		t.Fatal(err)
	}
	img := writeWorldImage(t, 0)
	model := filepath.Join(td, "clip-tiny", "openai.safetensors")
	goodRun := filepath.Join(tmp, "good-run")
	if b, err := exec.Command(bin, tinyRunArgs(tinyWorldModel(t), goodRun, 1)...).CombinedOutput(); err != nil {
		t.Fatalf("a good run for predict: %v\n%s", err, b)
	}
	goodSummary := `{"protocol": "base2novel", "metrics": ["local"], "methods": {"pfedmma": {"local": 50}}}`
	goodMetrics := `{"round":0,"method":"pfedmma","mean":{"local":50}}` + "\n"
	// each command line, with F where the bad file goes; a command whose
	// file sits in a folder gets the folder from its setup
	type command struct {
		name  string
		args  []string
		setup func(t *testing.T, bad string) []string
	}
	inDir := func(file, companion, content string) func(t *testing.T, bad string) []string {
		return func(t *testing.T, bad string) []string {
			dir := t.TempDir()
			b, err := os.ReadFile(bad)
			if err != nil { // the folder case: the file is a folder
				if err := os.Mkdir(filepath.Join(dir, file), 0o755); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(filepath.Join(dir, file), b, 0o644); err != nil {
				t.Fatal(err)
			}
			if companion != "" {
				if err := os.WriteFile(filepath.Join(dir, companion), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			return []string{dir}
		}
	}
	commands := []command{
		{"inspect --model", []string{"inspect", "--model", "F"}, nil},
		{"embed --model", []string{"embed", "--model", "F", "--text", "a cat"}, nil},
		{"embed --image", []string{"embed", "--image", "F"}, nil},
		{"embed --pixels", []string{"embed", "--pixels", "F"}, nil},
		{"zeroshot --image", []string{"zeroshot", "--classes", "a,b", "--image", "F"}, nil},
		{"zeroshot --model", []string{"zeroshot", "--model", "F", "--classes", "a,b", "--image", img}, nil},
		{"preprocess --image", []string{"preprocess", "--image", "F", "--out", filepath.Join(tmp, "pre.safetensors")}, nil},
		{"tokenize --vocab", []string{"tokenize", "--vocab", "F", "a cat"}, nil},
		{"step --params", []string{"step", "--method", "pfedmma", "--model", model, "--params", "F",
			"--batch", filepath.Join(td, "mma-l2/step.safetensors"), "--out", filepath.Join(tmp, "s.safetensors")}, nil},
		{"step --batch", []string{"step", "--method", "pfedmma", "--model", model, "--params",
			filepath.Join(td, "mma-l2/adapters_init.safetensors"), "--batch", "F", "--out", filepath.Join(tmp, "s.safetensors")}, nil},
		{"round --batch", []string{"round", "--method", "pfedmma", "--model", model, "--params",
			filepath.Join(td, "mma-l2/adapters_init.safetensors"), "--batch", "F", "--out", filepath.Join(tmp, "r.safetensors")}, nil},
		{"run --config", []string{"run", "--quiet", "--config", "F", "--out", filepath.Join(tmp, "run")}, nil},
		{"predict run.json", []string{"predict", "--image", img, "--run"}, inDir("run.json", "", "")},
		{"predict --image", []string{"predict", "--run", goodRun, "--image", "F"}, nil},
		{"embed --vocab", []string{"embed", "--vocab", "F", "--text", "a cat"}, nil},
		{"zeroshot --vocab", []string{"zeroshot", "--vocab", "F", "--classes", "a,b", "--image", img}, nil},
		{"run --model", []string{"run", "--quiet", "--model", "F", "--out", filepath.Join(tmp, "run-model")}, nil},
		{"report summary.json", []string{"report"}, inDir("summary.json", "metrics.jsonl", goodMetrics)},
		{"report metrics.jsonl", []string{"report"}, inDir("metrics.jsonl", "summary.json", goodSummary)},
	}
	bad := badFiles(t, tmp)
	for _, c := range commands {
		for kind, path := range bad {
			if c.name == "run --config" && kind == "empty" {
				continue // an empty config file means the defaults, by design (config.Compose)
			}
			t.Run(c.name+"/"+kind, func(t *testing.T) {
				args := slices.Clone(c.args)
				if c.setup != nil {
					args = append(args, c.setup(t, path)...)
				} else {
					for i, a := range args {
						if a == "F" {
							args[i] = path
						}
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, bin, args...)
				cmd.Dir = t.TempDir()
				cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+filepath.Join(tmp, "cache"))
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				err := cmd.Run()
				switch {
				case ctx.Err() != nil:
					t.Fatalf("pfedmma %s: still running after a minute", strings.Join(args, " "))
				case err == nil:
					t.Errorf("pfedmma %s: exit 0 on a bad file", strings.Join(args, " "))
				}
				for _, bad := range []string{"panic:", "fatal error:", "goroutine "} {
					if strings.Contains(stderr.String(), bad) {
						t.Errorf("pfedmma %s: %q on stderr:\n%s", strings.Join(args, " "), bad, stderr.String())
					}
				}
			})
		}
	}
}

// TestPFedMoAPGateWidthMessage: a gate width that does not divide the
// model's feature dimension is reported under its config key, gate_width of
// the pfedmoap section (before:
// "gating_embed_dim 24: must divide the feature dim", the fixture's name).
func TestPFedMoAPGateWidthMessage(t *testing.T) {
	model := tinyWorldModel(t)
	out := filepath.Join(t.TempDir(), "run")
	_, err := execute(t, append(tinyRunArgs(model, out, 1), "--set", "methods=[pfedmoap]", "--set", "pfedmoap.gate_width=23",
		"--set", "pfedmoap.gate_heads=1", "--set", "pfedmoap.num_experts=2")...)
	assertRefused(t, "pfedmoap.gate_width=23", err, "", "pfedmoap: gate_width", "23")
}

// TestReportRefusesFIFO: report on a run folder whose summary.json or
// metrics.jsonl is a FIFO fails at once naming it (before: it blocked).
func TestReportRefusesFIFO(t *testing.T) {
	const summary = `{"protocol": "base2novel", "metrics": ["local"], "methods": {"pfedmma": {"local": 50}}}`
	const metrics = `{"round":0,"method":"pfedmma","mean":{"local":50}}` + "\n"
	for _, name := range []string{"summary.json", "metrics.jsonl"} {
		dir := writeRunResults(t, summary, metrics)
		p := filepath.Join(dir, name)
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
		done := make(chan error, 1)
		go func() { _, err := execute(t, "report", dir); done <- err }()
		select {
		case err := <-done:
			assertRefused(t, name+" FIFO", err, "", p, "FIFO")
		case <-time.After(10 * time.Second):
			t.Fatalf("report blocked on the FIFO %s", p)
		}
	}
}
