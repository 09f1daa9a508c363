package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReportCommand re-draws three runs and compares them: per-run figures
// in PNG and SVG, the averaged table and the radar chart.
func TestReportCommand(t *testing.T) {
	t.Cleanup(func() { resetCommand(t, "run"); resetCommand(t, "report") })
	model := tinyWorldModel(t)
	var dirs []string
	for seed := 1; seed <= 3; seed++ {
		out := filepath.Join(t.TempDir(), fmt.Sprintf("run%d", seed))
		resetCommand(t, "run")
		rootCmd.SetArgs([]string{"run", "--quiet", "--out", out, "--set", "model=" + model,
			"--set", "dataset.num_classes=8", "--set", "federation.clients=2", "--set", "federation.rounds=1",
			"--set", "pfedmma.dim=8", "--set", fmt.Sprintf("seed=%d", seed), "--set", "methods=[zeroshot,promptfl]",
			"--set", "promptfl.n_ctx=2"})
		rootCmd.SetOut(&bytes.Buffer{})
		if err := rootCmd.Execute(); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"curves.png", "curves.svg", "final.png", "final.svg"} {
			if err := os.Remove(filepath.Join(out, f)); err != nil {
				t.Fatal(err)
			}
		}
		dirs = append(dirs, out)
	}
	cmp := filepath.Join(t.TempDir(), "cmp")
	var buf bytes.Buffer
	rootCmd.SetOut(&buf)
	resetCommand(t, "report")
	rootCmd.SetArgs(append(append([]string{"report"}, dirs...), "--out", cmp))
	if err := rootCmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		for _, f := range []string{"curves.png", "curves.svg", "final.png", "final.svg", "report.md"} {
			if _, err := os.Stat(filepath.Join(d, f)); err != nil {
				t.Errorf("report did not re-draw %s: %v", f, err)
			}
		}
	}
	for _, f := range []string{"radar.png", "radar.svg", "summary.json", "report.md"} {
		if _, err := os.Stat(filepath.Join(cmp, f)); err != nil {
			t.Errorf("comparison lacks %s: %v", f, err)
		}
	}
	if !strings.Contains(buf.String(), "Average on 3 datasets") || !strings.Contains(buf.String(), "promptfl") {
		t.Errorf("report output:\n%s", buf.String())
	}
	resetCommand(t, "report")
	rootCmd.SetArgs(append([]string{"report"}, dirs...))
	if err := rootCmd.Execute(); err == nil || !strings.Contains(err.Error(), "--out") {
		t.Errorf("several runs without --out: %v", err)
	}
}
