package bench

import (
	"context"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
)

// TestMethodBenchmarkPromptFolioFedPHA: `pfedmma bench train --method
// promptfolio|fedpha` trains and evaluates through each method's client on
// a small random model.
func TestMethodBenchmarkPromptFolioFedPHA(t *testing.T) {
	cfg := clip.Config{EmbedDim: 32,
		Vision: clip.VisionConfig{ImageSize: 32, PatchSize: 8, Width: 64, Layers: 3, Heads: 1, MLPWidth: 128},
		Text:   clip.TextConfig{ContextLength: 32, VocabSize: 600, Width: 64, Layers: 3, Heads: 1, MLPWidth: 128}}
	for _, name := range []string{"promptfolio", "fedpha"} {
		o := MethodOptions{Method: name, Batch: 4, Classes: 3, Steps: 2, Model: clip.New(clip.Random(cfg, 2)),
			Reference: &Reference{TrainImagesPerS: 1, EvalImagesPerS: 2}}
		r, err := Method(context.Background(), o)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !(r.TrainPerS > 0) || !(r.EvalPerS > 0) || r.SpeedupTrain != r.TrainPerS || r.SpeedupEval != r.EvalPerS/2 {
			t.Errorf("%s: %+v", name, r)
		}
	}
}
