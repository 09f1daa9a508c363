package pfedmoap

import (
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/methodtest"
)

// BenchmarkStepViTB16 is one pFedMoAP step at ViT-B/16 shapes: 24 classes,
// 16 context tokens, batch 32, the authors' gate (128 wide, 8 heads) over
// the local prompt and 9 experts (image features given: the image encoder
// is frozen; the experts' features are computed once, outside the loop).
func BenchmarkStepViTB16(b *testing.B) {
	const B, C = 32, 24
	m := clip.New(clip.Random(clip.ViTB16(), 1))
	cfg := DefaultConfig()
	l, err := New(m, methodtest.BenchTokens(C, 16), cfg)
	if err != nil {
		b.Fatal(err)
	}
	E := m.W.Config.EmbedDim
	rng := rand.New(rand.NewPCG(1, 2))
	experts := make([][]float32, cfg.NumExperts-1)
	for j := range experts {
		experts[j] = make([]float32, cfg.NCtx*l.D)
		for i := range experts[j] {
			experts[j][i] = float32(rng.NormFloat64() * 0.02)
		}
	}
	if err := l.SetExperts(experts); err != nil {
		b.Fatal(err)
	}
	img := make([]float32, B*E)
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
}
