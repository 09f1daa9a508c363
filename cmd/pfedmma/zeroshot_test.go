package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/world"
)

// TestZeroshotDefaultModel classifies rendered world images with the
// embedded model through `pfedmma zeroshot` and checks the printed ranking.
func TestZeroshotDefaultModel(t *testing.T) {
	w, err := world.New(world.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	classes, err := w.ChooseClasses(6, 3)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range classes {
		names = append(names, c.Name())
	}
	dir := t.TempDir()
	var args []string
	for i, c := range classes {
		img, err := w.Render(world.Spec{Split: world.TestSplit, Class: c, Domain: world.Clipart, Index: i}, 32)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, c.Name()+".png")
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := png.Encode(f, img); err != nil {
			t.Fatal(err)
		}
		f.Close()
		args = append(args, "--image", p)
	}
	var out bytes.Buffer
	rootCmd.SetOut(&out)
	rootCmd.SetArgs(append([]string{"zeroshot", "--classes", strings.Join(names, ","), "--top", "2"}, args...))
	if err := rootCmd.Execute(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3*len(classes) {
		t.Fatalf("want a header and 2 ranked classes per image, got:\n%s", out.String())
	}
	correct := 0
	for i, c := range classes {
		if !strings.HasSuffix(lines[3*i], c.Name()+".png") {
			t.Fatalf("line %q does not name image %d", lines[3*i], i)
		}
		if strings.Contains(lines[3*i+1], " "+c.Name()+" ") {
			correct++
		}
	}
	if correct < len(classes)/2 {
		t.Fatalf("zero-shot top-1 right on %d of %d rendered images:\n%s", correct, len(classes), out.String())
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
