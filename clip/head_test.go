package clip

import (
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/internal/gradcheck"
)

func TestCosineLogitsBackward(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 1))
	nI, nT, E := 3, 4, 5
	img, txt := gradcheck.Rand(rng, nI*E, 1), gradcheck.Rand(rng, nT*E, 1)
	scale := []float32{1.2}
	r := gradcheck.Rand(rng, nI*nT, 1)
	var c CosineLogits
	loss := func() float64 { return gradcheck.Dot(c.Forward(img, txt, nI, nT, E, scale[0]), r) }
	loss()
	dImg, dTxt := make([]float32, nI*E), make([]float32, nT*E)
	dScale := float32(c.Backward(r, dImg, dTxt))
	for _, tc := range []struct {
		name string
		p, g []float32
	}{{"img", img, dImg}, {"txt", txt, dTxt}, {"logit_scale", scale, []float32{dScale}}} {
		if err := gradcheck.Check(tc.name, tc.p, tc.g, loss, 1e-3, 2e-2, 20, rng); err != nil {
			t.Fatal(err)
		}
	}
}
