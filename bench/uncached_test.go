package bench

import (
	"context"
	"strings"
	"testing"

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
	if n := flops(frozenWork(MethodOptions{Batch: 2}, m, prefixcache.Features, px)); n != 0 {
		t.Errorf("cached: %d FLOPs of frozen work per step, want 0", n)
	}
	want := flops(func() { prefixcache.ImageRecords(m, prefixcache.Features, px, 2, nil) })
	if got := flops(frozenWork(MethodOptions{Batch: 2, Uncached: true}, m, prefixcache.Features, px)); got != want || want == 0 {
		t.Errorf("uncached: %d FLOPs of frozen work per step, want the image encoder's %d", got, want)
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
