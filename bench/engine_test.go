package bench

import (
	"context"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
)

// TestEngineSmall runs the engine benchmark at toy shapes: every reported
// quantity is measured (positive), and cancellation is honoured.
func TestEngineSmall(t *testing.T) {
	cfg := clip.Config{EmbedDim: 16,
		Vision: clip.VisionConfig{ImageSize: 32, PatchSize: 8, Width: 64, Layers: 2, Heads: 1, MLPWidth: 256},
		Text:   clip.TextConfig{ContextLength: 8, VocabSize: 16, Width: 32, Layers: 1, Heads: 1, MLPWidth: 64}}
	r, err := Engine(context.Background(), EngineOptions{Batch: 4, Config: cfg, Repeat: 1})
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]float64{
		"gemm_gflops": r.GemmGFLOPS, "block_forward_ms": r.BlockForwardMs, "block_backward_ms": r.BlockBackwardMs,
		"block_linear_gemm_gflops": r.BlockLinearGFLOPS, "image_forward_images_per_s": r.ImageForwardImagesPerS,
	} {
		if !(v > 0) {
			t.Errorf("%s = %v, want a positive measurement", name, v)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Engine(ctx, EngineOptions{Batch: 4, Config: cfg, Repeat: 1}); err == nil {
		t.Fatal("cancelled benchmark returned no error")
	}
}
