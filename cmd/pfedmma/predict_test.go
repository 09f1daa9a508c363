package main

import (
	"encoding/json"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/pfedmma/pfedmma/internal/testmodel"
	"github.com/pfedmma/pfedmma/runfiles"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/world"
)

// readRunJSON decodes a run folder's run.json as a generic object.
func readRunJSON(t *testing.T, run string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(run, runfiles.InfoFile))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func writeRunJSON(t *testing.T, run string, m map[string]any) {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(run, runfiles.InfoFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPredictPortable: a run folder and its model moved elsewhere (another
// machine) still predict: run.json's own files are relative to the run
// folder, and --model gives the model's new place, checked against the
// run's model digest (another model is refused). Without --model the
// error says to pass it (before: the old absolute path, no --model flag).
func TestPredictPortable(t *testing.T) {
	model := tinyWorldModel(t)
	out := filepath.Join(t.TempDir(), "run")
	if _, err := execute(t, tinyRunArgs(model, out, 1)...); err != nil {
		t.Fatal(err)
	}
	img := writeWorldImage(t, 0)
	want, err := execute(t, "predict", "--run", out, "--client", "1", "--image", img)
	if err != nil {
		t.Fatal(err)
	}
	info := readRunJSON(t, out)
	if sum, _ := info["model_sha256"].(string); len(sum) != 64 {
		t.Errorf("run.json model_sha256 %q, want a SHA-256", sum)
	}
	for m, dir := range info["sites"].(map[string]any) {
		if filepath.IsAbs(dir.(string)) {
			t.Errorf("run.json sites[%s] = %q: absolute", m, dir)
		}
	}
	// "another machine": both folders elsewhere, the old paths gone
	moved := filepath.Join(t.TempDir(), "copied-run")
	movedModel := filepath.Join(t.TempDir(), "model")
	if err := os.Rename(out, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(model, movedModel); err != nil {
		t.Fatal(err)
	}
	_, err = execute(t, "predict", "--run", moved, "--client", "1", "--image", img)
	if err == nil || !strings.Contains(err.Error(), "--model") || !strings.Contains(err.Error(), "not on this machine") {
		t.Errorf("predict without the model: error %v, want one asking for --model", err)
	}
	got, err := execute(t, "predict", "--run", moved, "--client", "1", "--model", movedModel, "--image", img)
	if err != nil {
		t.Fatalf("predict --model on the moved run: %v", err)
	}
	if got != want {
		t.Errorf("the moved run predicts\n%s\nbefore the move\n%s", got, want)
	}
	other := t.TempDir()
	if err := testmodel.Write(other, 24, 8); err != nil {
		t.Fatal(err)
	}
	_, err = execute(t, "predict", "--run", moved, "--client", "1", "--model", other, "--image", img)
	if err == nil || !strings.Contains(err.Error(), "is not the model") {
		t.Errorf("predict --model ANOTHER: error %v, want a refusal", err)
	}
}

// TestPredictEmbeddedModelByHash: a run on the embedded model predicts on
// a machine whose cache folder differs (run.json's absolute path is gone):
// the embedded model is found by its digest.
func TestPredictEmbeddedModelByHash(t *testing.T) {
	cacheA := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cacheA)
	out := filepath.Join(t.TempDir(), "run")
	args := tinyRunArgs("", out, 1)
	for i, a := range args {
		if a == "model=" {
			args = append(args[:i-1:i-1], args[i+1:]...)
			break
		}
	}
	if _, err := execute(t, args...); err != nil {
		t.Fatal(err)
	}
	img := writeWorldImage(t, 0)
	want, err := execute(t, "predict", "--run", out, "--image", img)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(cacheA); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	got, err := execute(t, "predict", "--run", out, "--image", img)
	if err != nil {
		t.Fatalf("predict after the model cache moved: %v", err)
	}
	if got != want {
		t.Errorf("predictions differ:\n%s\nvs\n%s", got, want)
	}
}

// TestPredictServedRunHint: a run coordinated by pfedmma serve (run.json
// "served") whose site files were not copied in is told where they are,
// not to set output.save_adapters.
func TestPredictServedRunHint(t *testing.T) {
	model := tinyWorldModel(t)
	out := filepath.Join(t.TempDir(), "run")
	if _, err := execute(t, tinyRunArgs(model, out, 1)...); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(out, "sites")); err != nil {
		t.Fatal(err)
	}
	img := writeWorldImage(t, 0)
	_, err := execute(t, "predict", "--run", out, "--client", "1", "--image", img)
	if err == nil || !strings.Contains(err.Error(), "output.save_adapters") {
		t.Errorf("a simulated run without site files: error %v", err)
	}
	info := readRunJSON(t, out)
	info["served"] = true
	writeRunJSON(t, out, info)
	_, err = execute(t, "predict", "--run", out, "--client", "1", "--image", img)
	if err == nil || strings.Contains(err.Error(), "save_adapters") || !strings.Contains(err.Error(), "pfedmma serve") ||
		!strings.Contains(err.Error(), "client_001.safetensors") {
		t.Errorf("a served run without site files: error %v, want the sites' state folders named", err)
	}
}

// writeWorldImage writes a rendered world test image of class c as PNG.
func writeWorldImage(t *testing.T, c int) string {
	t.Helper()
	w, _ := world.New(world.DefaultConfig())
	img, err := w.Render(world.Spec{Split: world.TestSplit, Class: w.Classes()[c], Domain: world.Photo}, 48)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), fmt.Sprintf("class%d.png", c))
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := png.Encode(f, img); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPredictCommand: the header names the site and the label space;
// --client out of range, --top 0 and an unknown --space are errors; --space
// all ranks every class; several images work; damaged (NaN) adapters are an
// error rather than "NaN%".
func TestPredictCommand(t *testing.T) {
	model := tinyWorldModel(t)
	out := filepath.Join(t.TempDir(), "run")
	if _, err := execute(t, tinyRunArgs(model, out, 1)...); err != nil {
		t.Fatal(err)
	}
	a, b := writeWorldImage(t, 0), writeWorldImage(t, 1)

	got, err := execute(t, "predict", "--run", out, "--client", "1", "--image", a, b, "--top", "2")
	if err != nil {
		t.Fatal(err)
	}
	header, _, _ := strings.Cut(got, "\n")
	if !strings.Contains(header, "site 1") || !strings.Contains(header, "label space") || !strings.Contains(header, "pfedmma") {
		t.Errorf("header %q does not name the method, site and label space", header)
	}
	if !strings.Contains(got, a) || !strings.Contains(got, b) || strings.Count(got, "%") != 4 {
		t.Errorf("two images, top 2: want 4 ranked lines naming both files:\n%s", got)
	}

	got, err = execute(t, "predict", "--run", out, "--space", "all", "--top", "100", "--image", a)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "label space all (8 classes)") || strings.Count(got, "%") != 8 {
		t.Errorf("--space all: want all 8 classes ranked:\n%s", got)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--client", "2"}, "--client 2"},
		{[]string{"--client", "-1"}, "--client -1"},
		{[]string{"--top", "0"}, "--top 0"},
		{[]string{"--space", "nope"}, "--space \"nope\""},
		{[]string{"--method", "nope"}, "nope"},
	} {
		args := append([]string{"predict", "--run", out, "--image", a}, tc.args...)
		if _, err := execute(t, args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("predict %v: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
	fifo := filepath.Join(t.TempDir(), "pipe.png")
	if err := syscall.Mkfifo(fifo, 0o600); err == nil {
		if _, err := execute(t, "predict", "--run", out, "--image", fifo); err == nil || !strings.Contains(err.Error(), "FIFO") {
			t.Errorf("predict on a FIFO: error %v", err)
		}
	}
	if _, err := execute(t, "predict", "--image", a); err == nil || !strings.Contains(err.Error(), "--run") {
		t.Errorf("predict without --run: error %v", err)
	}
	if _, err := execute(t, "predict", "--run", out); err == nil || !strings.Contains(err.Error(), "--image") {
		t.Errorf("predict without images: error %v", err)
	}

	help, err := execute(t, "predict", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--image FILE [FILE...]", "--run DIR ", "--space", "all", "--top", "--client"} {
		if !strings.Contains(help, want) {
			t.Errorf("predict --help lacks %q:\n%s", want, help)
		}
	}

	// Damage client 0's adapters: NaN in every saved tensor.
	file := filepath.Join(out, "sites", "pfedmma", "client_000.safetensors")
	f, err := safetensors.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := f.Float32All()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range ts {
		for i := range v.Data {
			v.Data[i] = float32(math.NaN())
		}
	}
	if err := safetensors.Write(file, ts, nil, nil); err != nil {
		t.Fatal(err)
	}
	got, err = execute(t, "predict", "--run", out, "--client", "0", "--image", a)
	if err == nil || !strings.Contains(err.Error(), "not finite") || strings.Contains(got, "NaN%") {
		t.Errorf("predict with NaN adapters: error %v, output:\n%s", err, got)
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
