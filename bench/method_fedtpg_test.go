package bench

import (
	"context"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
)

// TestMethodBenchmarkFedTPG: `pfedmma bench train --method fedtpg` trains
// and evaluates through its client on a small random model (in-memory
// prompt rows: the class names are the rows without their placeholders).
func TestMethodBenchmarkFedTPG(t *testing.T) {
	cfg := clip.Config{EmbedDim: 32,
		Vision: clip.VisionConfig{ImageSize: 32, PatchSize: 8, Width: 64, Layers: 3, Heads: 1, MLPWidth: 128},
		Text:   clip.TextConfig{ContextLength: 32, VocabSize: 600, Width: 64, Layers: 3, Heads: 1, MLPWidth: 128}}
	o := MethodOptions{Method: "fedtpg", Batch: 4, Classes: 3, Steps: 2, Model: clip.New(clip.Random(cfg, 2))}
	r, err := Method(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if !(r.TrainPerS > 0) || !(r.EvalPerS > 0) || r.Depth != "image features" {
		t.Errorf("%+v", r)
	}
}
