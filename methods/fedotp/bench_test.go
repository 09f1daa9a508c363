package fedotp

import (
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/methodtest"
)

// BenchmarkStepViTB16 is one FedOTP step at ViT-B/16 shapes: 196 patches,
// 24 classes, two prompts of 16 context tokens, batch 32, the scripts' COT
// at ε 0.01 (image features given: the image encoder is frozen).
func BenchmarkStepViTB16(b *testing.B) {
	const B, C = 32, 24
	m := clip.New(clip.Random(clip.ViTB16(), 1))
	l, err := New(m, methodtest.BenchTokens(C, 16), DefaultConfig())
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
