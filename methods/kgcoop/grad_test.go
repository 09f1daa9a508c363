package kgcoop

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/methods/fixturetest"
	"github.com/pfedmma/pfedmma/prompt"
)

// TestGradCheck compares the context's gradient with central differences of
// the loss along random directions, from init_rand (where the pull term has
// a gradient) with w = 8 and with w = 80 (the pull term dominating).
func TestGradCheck(t *testing.T) {
	m := fixturetest.Model(t)
	init, _ := fixturetest.Read(t, dir+"init_rand.safetensors")
	ref, meta := fixturetest.Read(t, dir+"step_rand.safetensors")
	for _, w := range []string{"8", "80"} {
		meta["w"] = w
		l, _, err := replay(ref).Learner(m, init, ref, meta, false)
		if err != nil {
			t.Fatal(err)
		}
		img := ref["image_features"].Data
		labels, err := prompt.Ints(ref, "labels")
		if err != nil {
			t.Fatal(err)
		}
		loss := func() float64 {
			v, _, _, err := l.Step(img, labels)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		_, terms, _, _ := l.Step(img, labels)
		if !(terms["score"] > 0) {
			t.Fatalf("w %s: score %v, want > 0 away from the init", w, terms["score"])
		}
		directional(t, "w "+w+" ctx", l.ctx.Data, l.grad.Clone().Data, loss, rand.New(rand.NewPCG(2, 2)))
	}
}

// directional compares the derivative of the loss along random unit
// directions v of one tensor with ⟨grad, v⟩. The derivative is Richardson's
// extrapolation of central differences, (4·D(ε/2) − D(ε)) / 3 with
// D(h) = (L(p+hv) − L(p−hv)) / 2h, exact to O(ε⁴): ε must be large because
// the logits (≈ e⁴·cos) are float32, rounded by ≈ 4e-6, and the text
// encoder is far from linear at that scale.
func directional(t *testing.T, name string, p, grad []float32, loss func() float64, rng *rand.Rand) {
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
