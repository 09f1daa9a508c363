package fedotp

import (
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
)

// benchTokens returns C synthetic prompts "SOT X×nCtx class . EOT" [C, 77]
// with the real model's SOT/EOT ids.
func benchTokens(C, nCtx int) []int {
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

// BenchmarkStepViTB16 is one FedOTP step at ViT-B/16 shapes: 196 patches,
// 24 classes, two prompts of 16 context tokens, batch 32, the scripts' COT
// at ε 0.01 (image features given: the image encoder is frozen).
func BenchmarkStepViTB16(b *testing.B) {
	const B, C = 32, 24
	m := clip.New(clip.Random(clip.ViTB16(), 1))
	l, err := New(m, benchTokens(C, 16), DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	T, E := m.W.Config.Vision.Tokens(), m.W.Config.EmbedDim
	rng := rand.New(rand.NewPCG(1, 2))
	img := make([]float32, B*T*E)
	for i := range img {
		img[i] = float32(rng.NormFloat64())
	}
	labels := make([]int, B)
	for i := range labels {
		labels[i] = i % C
	}
	b.ResetTimer()
	for b.Loop() {
		if _, _, err := l.Step(img, labels); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(B*b.N)/b.Elapsed().Seconds(), "images/s")
	b.ReportMetric(float64(l.head.Solve().Iters), "ot-iters")
}
