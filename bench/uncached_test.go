package bench

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/assets"
	"github.com/pfedmma/pfedmma/experiment"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/gemm"
	"github.com/pfedmma/pfedmma/methods/prefixcache"
)

func tinyCLIP() *clip.Model {
	cfg := clip.Config{EmbedDim: 32,
		Vision: clip.VisionConfig{ImageSize: 32, PatchSize: 8, Width: 64, Layers: 3, Heads: 1, MLPWidth: 128},
		Text:   clip.TextConfig{ContextLength: 32, VocabSize: 600, Width: 64, Layers: 3, Heads: 1, MLPWidth: 128}}
	return clip.New(clip.Random(cfg, 2))
}

// TestFrozenWork: --uncached runs the image encoder's frozen GEMMs before
// each step (the FLOPs of computing the batch's image features); without
// it nothing runs.
func TestFrozenWork(t *testing.T) {
	m := tinyCLIP()
	px := make([]float32, 2*3*32*32)
	for i := range px {
		px[i] = float32(i%7) / 7
	}
	gemm.EnableStats(true)
	defer gemm.EnableStats(false)
	flops := func(f func()) int64 {
		before := gemm.ReadStats().Flops
		f()
		return gemm.ReadStats().Flops - before
	}
	feats := &prefixcache.Prefixer{Model: m, Start: prefixcache.Features}
	if n := flops(frozenWork(MethodOptions{Batch: 2}, feats, px)); n != 0 {
		t.Errorf("cached: %d FLOPs of frozen work per step, want 0", n)
	}
	want := flops(func() { prefixcache.ImageRecords(m, prefixcache.Features, px, 2, nil) })
	if got := flops(frozenWork(MethodOptions{Batch: 2, Uncached: true}, feats, px)); got != want || want == 0 {
		t.Errorf("uncached: %d FLOPs of frozen work per step, want the image encoder's %d", got, want)
	}
	// split records recompute block ℓ too: the prefix before block 2 plus
	// block 2
	split := &prefixcache.Prefixer{Model: m, Start: 2, Split: true}
	prefix := flops(func() { prefixcache.ImageRecords(m, 2, px, 2, nil) })
	block := flops(func() { m.Vision.Stack.Forward(make([]float32, 2*17*64), 2, 17, 1, 2, nil, false) })
	if got := flops(frozenWork(MethodOptions{Batch: 2, Uncached: true}, split, px)); got != prefix+block || block == 0 {
		t.Errorf("uncached, split records: %d FLOPs of frozen work per step, want the prefix's %d + block 2's %d", got, prefix, block)
	}
}

// TestMethodBenchmarkUncached: `bench train --method promptfl --uncached`
// says that nothing is cached and what it recomputes.
func TestMethodBenchmarkUncached(t *testing.T) {
	r, err := Method(context.Background(), MethodOptions{Method: "promptfl", Batch: 4, Classes: 3, Steps: 2, Model: tinyCLIP(), Uncached: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Depth != "none" || !strings.Contains(r.Recomputed, "image features") || !(r.TrainPerS > 0) || !(r.EvalPerS > 0) {
		t.Errorf("%+v", r)
	}
}

// TestMethodBenchmarkVocab: FedMVP tokenises its class descriptions, so
// `bench train --method fedmvp` needs --vocab; without it the error says
// so, and a missing file is named.
func TestMethodBenchmarkVocab(t *testing.T) {
	dir, err := assets.DefaultModelDir()
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := experiment.LoadModel(filepath.Join(dir, "model.safetensors"), "")
	if err != nil {
		t.Fatal(err)
	}
	o := MethodOptions{Method: "fedmvp", Batch: 2, Classes: 3, Steps: 1, Model: m}
	if _, err := Method(context.Background(), o); err == nil || !strings.Contains(err.Error(), "tokenizer") {
		t.Errorf("without a vocabulary: %v, want an error about the tokenizer", err)
	}
	o.Vocab = filepath.Join(t.TempDir(), "missing.txt.gz")
	if _, err := Method(context.Background(), o); err == nil || !strings.Contains(err.Error(), "missing.txt.gz") {
		t.Errorf("a missing vocabulary: %v, want an error naming the file", err)
	}
	o.Vocab = filepath.Join(dir, "bpe_simple_vocab_16e6.txt.gz")
	r, err := Method(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if !(r.TrainPerS > 0) || !(r.EvalPerS > 0) || !strings.Contains(r.Depth, "embeddings") {
		t.Errorf("%+v", r)
	}
}
