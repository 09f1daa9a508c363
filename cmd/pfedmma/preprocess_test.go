package main

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/preprocess"
	"github.com/pfedmma/pfedmma/safetensors"
)

func TestPreprocessCommandWritesTensors(t *testing.T) {
	dir := "../../testdata/preprocess"
	out := filepath.Join(t.TempDir(), "out.safetensors")
	images := []string{filepath.Join(dir, "wide_rgb.png"), filepath.Join(dir, "square.jpg")}
	cmd := newPreprocessCmd()
	cmd.SetArgs([]string{"--image", images[0], images[1], "--size", "64", "--out", out})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	if f.Len() != 2 {
		t.Fatalf("%d tensors, want 2", f.Len())
	}
	tr := preprocess.CLIPTransform(64)
	for _, p := range images {
		want, err := tr.EvalFile(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := f.Float32(filepath.Base(p))
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Shape) != 3 || got.Shape[0] != 3 || got.Shape[1] != 64 || got.Shape[2] != 64 {
			t.Fatalf("%s: shape %v", p, got.Shape)
		}
		for i := range want {
			if got.Data[i] != want[i] {
				t.Fatalf("%s: value %d = %v want %v", p, i, got.Data[i], want[i])
			}
		}
	}
	// Bad invocations fail without writing.
	for _, args := range [][]string{
		{images[0], "../" + dir + "/wide_rgb.png", "--out", out}, // same base name
		{"--out", out}, // no images
		{images[0]},    // no --out
		{images[0], "--out", out, "--size", "0"},
		{images[0], "--out", out, "--size", "30000"},
		{images[0], "--out", out, "--size", "8"},
		{images[0], "--out", out, "--interp", "lanczos"},
		{filepath.Join(dir, "missing.png"), "--out", out},
	} {
		cmd := newPreprocessCmd()
		cmd.SetArgs(args)
		cmd.SilenceErrors, cmd.SilenceUsage = true, true
		err := cmd.ExecuteContext(context.Background())
		if err == nil {
			t.Errorf("%v: no error", args)
		} else if slices.Contains(args, "--size") && !strings.Contains(err.Error(), "--size") {
			t.Errorf("%v: error %q does not name --size", args, err)
		}
	}
}
