package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/internal/testmodel"
)

// readRunJSON decodes a run folder's run.json as a generic object.
func readRunJSON(t *testing.T, run string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(run, experiment.RunInfoFile))
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
	if err := os.WriteFile(filepath.Join(run, experiment.RunInfoFile), b, 0o644); err != nil {
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
