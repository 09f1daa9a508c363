package methodtest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/internal/gradcheck"
)

// Directional compares the derivative of the loss along three random unit
// directions v of one tensor p with ⟨grad, v⟩. The derivative is
// Richardson's extrapolation of central differences, (4·D(ε/2) − D(ε)) / 3
// with D(h) = (L(p+hv) − L(p−hv)) / 2h, exact to O(ε⁴): ε (2e-2) must be
// large because the logits (≈ e⁴·cos) are float32, rounded by ≈ 4e-6, and
// the text encoder is far from linear at that scale. The relative error
// must stay below 2e-2.
func Directional(t testing.TB, name string, p, grad []float32, loss func() float64, rng *rand.Rand) {
	t.Helper()
	const eps = 2e-2
	for k := 0; k < 3; k++ {
		v := gradcheck.Rand(rng, len(p), 1)
		norm := float32(math.Sqrt(gradcheck.Dot(v, v)))
		for i := range v {
			v[i] /= norm
		}
		old := append([]float32(nil), p...)
		at := func(h float32) float64 {
			for i := range p {
				p[i] = old[i] + h*v[i]
			}
			return loss()
		}
		d := func(h float32) float64 { return (at(h) - at(-h)) / (2 * float64(h)) }
		num := (4*d(eps/2) - d(eps)) / 3
		copy(p, old)
		// relative to |num|, or to a tenth of ‖grad‖ for a direction nearly
		// orthogonal to the gradient
		ana := gradcheck.Dot(grad, v)
		if e := math.Abs(num-ana) / math.Max(math.Abs(num), 0.1*math.Sqrt(gradcheck.Dot(grad, grad))); !(e < 2e-2) {
			t.Errorf("%s, direction %d: numeric %.6g vs analytic %.6g (relative error %.3g)", name, k, num, ana, e)
		} else {
			t.Logf("%s, direction %d: numeric %.6g vs analytic %.6g", name, k, num, ana)
		}
	}
}
