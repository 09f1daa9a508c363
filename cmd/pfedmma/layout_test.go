package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOldLayoutRunReadable (issue 20): a pFedMMA run folder written
// before the sites/<method>/ and global/<method>.safetensors layout — its
// files in adapters/, run.json naming that folder — is still read: predict
// gives the same classes, report reads it, and --resume finds it finished.
func TestOldLayoutRunReadable(t *testing.T) {
	model := tinyWorldModel(t)
	out := filepath.Join(t.TempDir(), "run")
	if _, err := execute(t, tinyRunArgs(model, out, 1)...); err != nil {
		t.Fatal(err)
	}
	img := writeWorldImage(t, 0)
	predict := []string{"predict", "--run", out, "--client", "1", "--image", img, "--top", "3"}
	want, err := execute(t, predict...)
	if err != nil {
		t.Fatal(err)
	}
	// the layout of earlier runs
	if err := os.Rename(filepath.Join(out, "sites", "pfedmma"), filepath.Join(out, "adapters")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(out, "global", "pfedmma.safetensors"), filepath.Join(out, "adapters", "global_shared.safetensors")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(out, "global")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "run.json"))
	if err != nil {
		t.Fatal(err)
	}
	var info map[string]any
	if err := json.Unmarshal(b, &info); err != nil {
		t.Fatal(err)
	}
	info["sites"].(map[string]any)["pfedmma"] = "adapters"
	if b, err = json.Marshal(info); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "run.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := execute(t, predict...)
	if err != nil || got != want {
		t.Errorf("predict on the old layout: %v\n%s\nwant:\n%s", err, got, want)
	}
	if rep, err := execute(t, "report", out); err != nil || !strings.Contains(rep, "pfedmma") {
		t.Errorf("report on the old layout: %v\n%s", err, rep)
	}
	if res, err := execute(t, append(tinyRunArgs(model, out, 1), "--resume")...); err != nil || !strings.Contains(res, "nothing to do") {
		t.Errorf("--resume of the finished old-layout run: %v\n%s", err, res)
	}
	if _, err := os.Stat(filepath.Join(out, "adapters", "client_001.safetensors")); err != nil {
		t.Errorf("--resume changed the old layout: %v", err)
	}
	// --force clears the old layout as a run's output
	if _, err := execute(t, append(tinyRunArgs(model, out, 1), "--force")...); err != nil {
		t.Fatalf("--force over the old layout: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "sites", "pfedmma", "client_001.safetensors")); err != nil {
		t.Errorf("--force run: %v", err)
	}
}
