package bench

import (
	"context"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
)

// TestMethodBenchmarkMaPLe: `pfedmma bench train --method maple` trains and
// evaluates through its client on a small random model, from the cached
// input of the first image block (its prompt depth fitted to the model).
func TestMethodBenchmarkMaPLe(t *testing.T) {
	cfg := clip.Config{EmbedDim: 32,
		Vision: clip.VisionConfig{ImageSize: 32, PatchSize: 8, Width: 64, Layers: 3, Heads: 1, MLPWidth: 128},
		Text:   clip.TextConfig{ContextLength: 32, VocabSize: 600, Width: 64, Layers: 3, Heads: 1, MLPWidth: 128}}
	o := MethodOptions{Method: "maple", Batch: 4, Classes: 3, Steps: 2, Model: clip.New(clip.Random(cfg, 2))}
	r, err := Method(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if !(r.TrainPerS > 0) || !(r.EvalPerS > 0) || !strings.Contains(r.Depth, "block 0") {
		t.Errorf("%+v", r)
	}
}
