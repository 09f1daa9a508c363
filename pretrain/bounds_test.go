package pretrain

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSizeBounds: sizes that would exhaust memory are refused by Validate
// naming the flag (before: --vision-width 1000000 ran out of memory), and
// the memory estimate refuses what the machine cannot hold while the
// shipped settings fit in 1 GiB.
func TestSizeBounds(t *testing.T) {
	cases := []struct {
		flag string
		set  func(*Options)
	}{
		{"--vision-width", func(o *Options) { o.VisionWidth = 1000000 }},
		{"--text-width", func(o *Options) { o.TextWidth = 1 << 20 }},
		{"--vision-layers", func(o *Options) { o.VisionLayers = 100000 }},
		{"--context", func(o *Options) { o.ContextLength = 2000000000 }},
		{"--batch", func(o *Options) { o.Batch = 1 << 30 }},
		{"--merges", func(o *Options) { o.Merges = 1 << 30 }},
		{"--embed-dim", func(o *Options) { o.EmbedDim = 1 << 30 }},
		{"--eval-per-class", func(o *Options) { o.EvalPerClass = 1 << 30 }},
		{"--workers", func(o *Options) { o.Workers = 100000 }},
	}
	for _, c := range cases {
		o := DefaultOptions()
		c.set(&o)
		err := o.Validate()
		if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%s: %v", c.flag, err)
		}
	}
	o := DefaultOptions()
	if err := o.checkMemory(1024); err != nil {
		t.Errorf("shipped settings in 1 GiB: %v (estimate %d bytes)", err, o.EstimateBytes())
	}
	o.Batch, o.VisionWidth, o.VisionHeads = 60000, 4096, 64
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	err := o.checkMemory(16 << 10)
	if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), "--batch") || !strings.Contains(err.Error(), "16.0 GiB available") {
		t.Errorf("batch 60000 of width 4096 in 16 GiB: %v", err)
	}
}

// TestOutDirKeepsForeignFiles: pretrain into a folder holding a
// model.safetensors it did not write is refused naming it, and the file is
// kept (before: overwritten).
func TestOutDirKeepsForeignFiles(t *testing.T) {
	dir := t.TempDir()
	mine := filepath.Join(dir, ModelFile)
	if err := os.WriteFile(mine, []byte("my model"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.OutDir = dir
	_, err := Run(context.Background(), o, nil)
	if err == nil || !strings.Contains(err.Error(), ModelFile) || !strings.Contains(err.Error(), "did not write") {
		t.Fatalf("pretrain into a folder with a foreign %s: %v", ModelFile, err)
	}
	if b, err := os.ReadFile(mine); err != nil || string(b) != "my model" {
		t.Errorf("%s changed: %q, %v", mine, b, err)
	}
	// a marked folder (an earlier pretraining) is written again
	if err := os.WriteFile(filepath.Join(dir, MarkerFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := o.checkOutDir(); err != nil {
		t.Errorf("marked folder: %v", err)
	}
}
