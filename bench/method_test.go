package bench

import (
	"context"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/methods"
)

// TestMethodBenchmark runs every registered trained method's benchmark on a
// small random model against a reference: each trains and evaluates
// through its client, and its speedups are its rates over the reference's.
func TestMethodBenchmark(t *testing.T) {
	cfg := clip.Config{EmbedDim: 32,
		Vision: clip.VisionConfig{ImageSize: 32, PatchSize: 8, Width: 64, Layers: 3, Heads: 1, MLPWidth: 128},
		Text:   clip.TextConfig{ContextLength: 32, VocabSize: 600, Width: 64, Layers: 3, Heads: 1, MLPWidth: 128}}
	names := methods.Names()
	if len(names) < 10 {
		t.Fatalf("%d registered methods (%v): methods/all not linked in", len(names), names)
	}
	for _, name := range names {
		if name == "zeroshot" {
			continue // does not train: checked below
		}
		m := clip.New(clip.Random(cfg, 2))
		o := MethodOptions{Method: name, Batch: 4, Classes: 3, Steps: 2, Model: m, Reference: &Reference{TrainImagesPerS: 1, EvalImagesPerS: 2}}
		if name == "pfedmoap" {
			continue // its gate is 128 wide by default, wider than this model's 32 features
		}
		r, err := Method(context.Background(), o)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !(r.TrainPerS > 0) || !(r.EvalPerS > 0) || r.SpeedupTrain != r.TrainPerS || r.SpeedupEval != r.EvalPerS/2 {
			t.Errorf("%s: %+v", name, r)
		}
	}
	if _, err := Method(context.Background(), MethodOptions{Method: "zeroshot", Model: clip.New(clip.Random(cfg, 2))}); err == nil {
		t.Error("zeroshot was benchmarked as a trained method")
	}
}
