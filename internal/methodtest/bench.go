package methodtest

import (
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// PromptLearner is a prompt method's learner as the step benchmarks drive
// it: a training step on cached image features, its parameters and their
// gradients.
type PromptLearner interface {
	Step(img []float32, labels []int) (float64, map[string]float64, []float32, error)
	Params() tensor.Named
	Grads() tensor.Named
}

// BenchPromptStep benchmarks one training step (text forward and backward,
// loss, momentum SGD) of the learner build makes at ViT-B/16 text shapes:
// width 512, 12 blocks, 8 heads, n_ctx 16, 24 classes with 1–4-token
// names, batch 32 of cached image features. It reports images/s.
func BenchPromptStep(b *testing.B, build func(m *clip.Model, tokens []int, nCtx int) (PromptLearner, error)) {
	cfg := clip.ViTB16()
	m := clip.New(clip.Random(cfg, 1))
	const C, nCtx, B = 24, 16, 32
	L := cfg.Text.ContextLength
	tokens := make([]int, C*L)
	for c := 0; c < C; c++ {
		row := tokens[c*L:]
		row[0] = 49406 // SOT
		p := 1
		for ; p <= nCtx; p++ {
			row[p] = 343 // "x</w>"
		}
		for k := 0; k <= c%4; k++ {
			row[p] = 1000 + 37*c + k
			p++
		}
		row[p], row[p+1] = 269, 49407 // ".", EOT
	}
	l, err := build(m, tokens, nCtx)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	img := gradcheck.Rand(rng, B*cfg.EmbedDim, 1)
	labels := make([]int, B)
	for i := range labels {
		labels[i] = i % C
	}
	opt := optim.NewSGD(0.9, 5e-4, false)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, _, err := l.Step(img, labels); err != nil {
			b.Fatal(err)
		}
		if err := opt.Step(0.001, prompt.OptimParams(l.Params(), l.Grads())); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(B*b.N)/b.Elapsed().Seconds(), "images/s")
}

// BenchTokens returns C synthetic prompts "SOT X×nCtx class . EOT" [C, 77]
// with the real model's SOT/EOT ids.
func BenchTokens(C, nCtx int) []int {
	tok := make([]int, C*77)
	for c := 0; c < C; c++ {
		row := tok[c*77:]
		row[0] = 49406
		for i := 1; i <= nCtx; i++ {
			row[i] = 343
		}
		row[nCtx+1], row[nCtx+2], row[nCtx+3] = 1000+c, 269, 49407
	}
	return tok
}
