package preprocess

import (
	"bytes"
	"image/jpeg"
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

// BenchmarkDecodeJPEG decodes a 1200×900 4:2:0 JPEG to RGB with this build's
// decoder; BenchmarkDecodeJPEGStdlib does the same with image/jpeg for
// comparison.
func BenchmarkDecodeJPEG(b *testing.B) {
	data := readFixture(b, "big_q75.jpg")
	for b.Loop() {
		img, err := decodeBytes(data)
		if err != nil {
			b.Fatal(err)
		}
		if m, ok := img.(*rgbImage); !ok || len(m.Pix) == 0 {
			_ = ToRGB(img)
		}
	}
}

func BenchmarkDecodeJPEGStdlib(b *testing.B) {
	data := readFixture(b, "big_q75.jpg")
	for b.Loop() {
		img, err := jpeg.Decode(bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		_ = ToRGB(img)
	}
}
