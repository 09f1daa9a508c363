package preprocess

import (
	"math/rand/v2"
	"testing"
)

func BenchmarkEvalVGA(b *testing.B) {
	img := randomRGB(640, 480, 1)
	tr := CLIPTransform(224)
	dst := make([]float32, tr.Len())
	b.ResetTimer()
	for b.Loop() {
		if _, err := tr.EvalRGB(img, dst); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAugmentVGA(b *testing.B) {
	img := randomRGB(640, 480, 1)
	tr := CLIPTransform(224)
	rng := rand.New(rand.NewPCG(1, 1))
	dst := make([]float32, tr.Len())
	for b.Loop() {
		if _, err := tr.AugmentRGB(img, rng, dst); err != nil {
			b.Fatal(err)
		}
	}
}
