package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTuneCommand: `pfedmma tune` runs the grid on the validation split,
// prints the table and the chosen --set line, and writes the fragment; it
// refuses a missing --method naming the flag.
func TestTuneCommand(t *testing.T) {
	model, out := tinyWorldModel(t), t.TempDir()
	args := []string{"tune", "--quiet", "--method", "pfedmma", "--grid", "optimizer.lr=0.001,0.1", "--out", out,
		"--set", "model=" + model, "--set", "dataset.num_classes=8", "--set", "federation.clients=2",
		"--set", "federation.rounds=1", "--set", "pfedmma.dim=8", "--seeds", "1"}
	text, err := execute(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "chosen: --set optimizer.lr=") || !strings.Contains(text, "protocol.validation was 0") {
		t.Fatalf("output lacks the chosen settings or the validation default:\n%s", text)
	}
	for _, f := range []string{"tune.md", "tune.png", "chosen.yaml", "chosen.sets"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := execute(t, "tune", "--grid", "optimizer.lr=0.1", "--out", t.TempDir()); err == nil || !strings.Contains(err.Error(), "--method") {
		t.Fatalf("no --method: error %v, want one naming --method", err)
	}
}
