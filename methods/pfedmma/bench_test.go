package pfedmma

import (
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
)

// benchLearner is pFedMMA at the paper's setting (ViT-B/16 shapes, random
// weights, blocks 10–12, r 32) with 24 class prompts and a batch of 32
// random cached prefixes.
func benchLearner(b *testing.B) (*Learner, []float32, []int) {
	b.Helper()
	cfg := clip.ViTB16()
	cfg.Text.VocabSize = 1000
	m := clip.New(clip.Random(cfg, 1))
	rng := rand.New(rand.NewPCG(2, 3))
	const B, C = 32, 24
	ctx := cfg.Text.ContextLength
	tokens := make([]int, C*ctx)
	for c := range C {
		n := 5 + rng.IntN(8)
		tokens[c*ctx] = 998
		for i := 1; i < n; i++ {
			tokens[c*ctx+i] = 1 + rng.IntN(990)
		}
		tokens[c*ctx+n] = 999
	}
	a := New(Config{Start: 10, End: 12, Dim: 32, Scale: 0.005}, cfg.Vision.Width, cfg.Text.Width, rng)
	l, err := NewLearner(m, a, nil)
	if err != nil {
		b.Fatal(err)
	}
	l.Attach()
	if err := l.SetClasses(tokens, C); err != nil {
		b.Fatal(err)
	}
	prefix := make([]float32, B*cfg.Vision.Tokens()*cfg.Vision.Width)
	for i := range prefix {
		prefix[i] = float32(rng.NormFloat64())
	}
	labels := make([]int, B)
	for i := range labels {
		labels[i] = rng.IntN(C)
	}
	return l, prefix, labels
}

// BenchmarkTrainStep is one training step on cached prefixes (both
// encoders' blocks 10–12 forward and backward), batch 32.
func BenchmarkTrainStep(b *testing.B) {
	l, prefix, labels := benchLearner(b)
	step := func() {
		l.Adapters.ZeroGrads()
		if _, _, err := l.Step(prefix, len(labels), labels); err != nil {
			b.Fatal(err)
		}
	}
	step()
	b.ResetTimer()
	for range b.N {
		step()
	}
	b.ReportMetric(float64(b.N*len(labels))/b.Elapsed().Seconds(), "img/s")
}

// BenchmarkEvalBatch is one evaluation batch on cached prefixes (the image
// side of blocks 10–12 and the logits), batch 32.
func BenchmarkEvalBatch(b *testing.B) {
	l, prefix, labels := benchLearner(b)
	txt := append([]float32(nil), l.TextFeatures(false)...)
	l.Logits(prefix, len(labels), txt)
	b.ResetTimer()
	for range b.N {
		l.Logits(prefix, len(labels), txt)
	}
	b.ReportMetric(float64(b.N*len(labels))/b.Elapsed().Seconds(), "img/s")
}
