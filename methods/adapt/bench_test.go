package adapt

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
)

// benchStep times one ADAPT training step at ViT-B/16 shapes (random
// weights): batch 32, 4 domains, n_ctx 16, C classes; the image side runs
// all 12 blocks forward and backward to the visual prompts, the text side
// encodes 4·C prompts and back-propagates to the own one.
func benchStep(b *testing.B, C int, ada bool) {
	cfg := clip.ViTB16()
	m := clip.New(clip.Random(cfg, 1))
	const B, n, nCtx = 32, 4, 16
	ctx := cfg.Text.ContextLength
	var tokens []int
	for c := 0; c < C; c++ {
		row := make([]int, ctx)
		row[0] = 49406
		for j := 1; j <= nCtx; j++ {
			row[j] = 343
		}
		row[nCtx+1], row[nCtx+2], row[nCtx+3] = 1000+c, 269, 49407
		tokens = append(tokens, row...)
	}
	c := Config{Domains: n, NCtx: nCtx, InitStd: 0.02, VisualStd: 0.02, Tau: 0.1, Lambda: 1, AdaLN: ada, AdaLNLayers: 3, Seed: 1}
	l, err := NewLearner(m, tokens, c)
	if err != nil {
		b.Fatal(err)
	}
	P := InitParams(c, l.Dt, l.Dv, l.E)
	G := zerosLike(P)
	rng := rand.New(rand.NewPCG(1, 1))
	x0 := gradcheck.Rand(rng, B*cfg.Vision.Tokens()*cfg.Vision.Width, 1)
	labels := make([]int, B)
	for i := range labels {
		labels[i] = rng.IntN(C)
	}
	if _, _, _, err := l.Step(P, G, x0, labels, 1); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, _, err := l.Step(P, G, x0, labels, 1); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(B*b.N)/b.Elapsed().Seconds(), "img/s")
}

// BenchmarkStepViTB16 is one step at ViT-B/16 shapes, batch 32, 4 domains,
// 10 classes (the FedBN DomainNet subset), with and without AdaLN.
func BenchmarkStepViTB16(b *testing.B) {
	for _, ada := range []bool{false, true} {
		b.Run(fmt.Sprintf("C=10/adaln=%v", ada), func(b *testing.B) { benchStep(b, 10, ada) })
	}
}
