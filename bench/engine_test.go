package bench

import (
	"context"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/gemm"
)

// TestEngineSmall runs the engine benchmark at toy shapes: every reported
// quantity is measured (positive), and cancellation is honoured.
func TestEngineSmall(t *testing.T) {
	cfg := clip.Config{EmbedDim: 16,
		Vision: clip.VisionConfig{ImageSize: 32, PatchSize: 8, Width: 64, Layers: 2, Heads: 1, MLPWidth: 256},
		Text:   clip.TextConfig{ContextLength: 8, VocabSize: 16, Width: 32, Layers: 1, Heads: 1, MLPWidth: 64}}
	for _, p := range []gemm.Precision{gemm.FP32, gemm.BF16} {
		r, err := Engine(context.Background(), EngineOptions{Batch: 4, Config: cfg, Repeat: 3, Precision: p})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]float64{
			"gemm_gflops": r.GemmGFLOPS, "block_forward_ms": r.BlockForwardMs, "block_backward_ms": r.BlockBackwardMs,
			"block_linear_gemm_gflops": r.BlockLinearGFLOPS, "image_forward_images_per_s": r.ImageForwardImagesPerS,
			"image_forward_gemm_gflops": r.ImageForwardGemmGFLOPS,
		}
		if p == gemm.BF16 {
			m["gemm_bf16_gflops"] = r.GemmBF16GFLOPS
		}
		for name, v := range m {
			if !(v > 0) {
				t.Errorf("%s: %s = %v, want a positive measurement", p, name, v)
			}
		}
		if r.Precision != p.String() || r.Core == "" || r.Repeat != 3 || r.BlockForwardSpread < 0 {
			t.Errorf("%s: precision %q, core %q, repeat %d, spread %v", p, r.Precision, r.Core, r.Repeat, r.BlockForwardSpread)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Engine(ctx, EngineOptions{Batch: 4, Config: cfg, Repeat: 1}); err == nil {
		t.Fatal("cancelled benchmark returned no error")
	}
}
