package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/internal/testmodel"
	"github.com/pfedmma/pfedmma/world"
)

// tinyWorldModel writes a small random CLIP with a vocabulary learned from
// world class prompts.
func tinyWorldModel(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := testmodel.Write(dir, 24, 7); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestRunAndPredictCommands(t *testing.T) {
	model := tinyWorldModel(t)
	out := filepath.Join(t.TempDir(), "run")
	args := []string{"run", "--quiet", "--out", out, "--set", "model=" + model,
		"--set", "dataset.num_classes=8", "--set", "federation.clients=2", "--set", "federation.rounds=2",
		"--set", "pfedmma.dim=8"}
	var buf bytes.Buffer
	rootCmd.SetOut(&buf)
	rootCmd.SetArgs(args)
	if err := rootCmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"zeroshot", "pfedmma", "Local", "HM"} {
		if !strings.Contains(buf.String(), want) {
			t.Fatalf("run output lacks %q:\n%s", want, buf.String())
		}
	}
	for _, f := range []string{"config.yaml", "fingerprint.txt", "run.json", "summary.json", "report.md", "curves.png", "sites/pfedmma/client_001.safetensors"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Fatalf("run output %s: %v", f, err)
		}
	}

	// resume with a different configuration is refused
	rootCmd.SetArgs(append(append([]string{}, args...), "--resume", "--set", "federation.rounds=3", "--set", "seed=99"))
	if err := rootCmd.Execute(); err == nil || !strings.Contains(err.Error(), "configuration differs") {
		t.Fatalf("resume with another config: error %v", err)
	}

	// predict with client 1's adapters on a rendered world image
	w, _ := world.New(world.DefaultConfig())
	img, err := w.Render(world.Spec{Split: world.TestSplit, Class: w.Classes()[0], Domain: world.Photo}, 48)
	if err != nil {
		t.Fatal(err)
	}
	imgPath := filepath.Join(t.TempDir(), "x.png")
	f, _ := os.Create(imgPath)
	if err := png.Encode(f, img); err != nil {
		t.Fatal(err)
	}
	f.Close()
	buf.Reset()
	rootCmd.SetArgs([]string{"predict", "--run", out, "--client", "1", "--image", imgPath, "--top", "3"})
	if err := rootCmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(buf.String(), "%"); lines != 3 {
		t.Fatalf("predict printed %d ranked classes, want 3:\n%s", lines, buf.String())
	}
	rootCmd.SetArgs([]string{"predict", "--run", out, "--client", "7", "--image", imgPath})
	if err := rootCmd.Execute(); err == nil || !strings.Contains(err.Error(), "--client 7") {
		t.Fatalf("predict for a missing client: error %v", err)
	}
}
