// Package gradcheck compares analytic gradients with central finite
// differences; the tests of every layer and model use it.
package gradcheck

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Check perturbs up to samples entries of param by ±eps, evaluates loss and
// compares (L(p+eps) − L(p−eps)) / 2eps with grad. It returns an error
// naming the worst entry when |numeric − analytic| > tol·(1 + |numeric|)
// (relative to the largest gradient magnitude seen, so near-zero entries do
// not dominate).
func Check(name string, param, grad []float32, loss func() float64, eps float32, tol float64, samples int, rng *rand.Rand) error {
	if len(param) != len(grad) {
		return fmt.Errorf("%s: param has %d values, grad %d", name, len(param), len(grad))
	}
	idx := make([]int, 0, samples)
	if len(param) <= samples {
		for i := range param {
			idx = append(idx, i)
		}
	} else {
		for len(idx) < samples {
			idx = append(idx, rng.IntN(len(param)))
		}
	}
	var scale float64
	for _, g := range grad {
		scale = math.Max(scale, math.Abs(float64(g)))
	}
	type res struct {
		i           int
		num, ana, e float64
	}
	worst := res{e: -1}
	for _, i := range idx {
		old := param[i]
		param[i] = old + eps
		lp := loss()
		param[i] = old - eps
		lm := loss()
		param[i] = old
		num := (lp - lm) / (2 * float64(eps))
		ana := float64(grad[i])
		e := math.Abs(num-ana) / (1e-2*scale + math.Abs(num) + 1e-6)
		if math.IsNaN(num) || math.IsNaN(ana) {
			e = math.Inf(1)
		}
		if e > worst.e {
			worst = res{i, num, ana, e}
		}
	}
	if worst.e > tol {
		return fmt.Errorf("%s[%d]: numeric %.6g vs analytic %.6g (relative error %.3g > %.3g)", name, worst.i, worst.num, worst.ana, worst.e, tol)
	}
	return nil
}

// Dot is Σ a_i·b_i in float64: the scalar loss L = Σ out ⊙ r used to test a
// layer, whose gradient with respect to out is r.
func Dot(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

// Rand returns n values uniform in [−scale, scale).
func Rand(rng *rand.Rand, n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = (rng.Float32()*2 - 1) * scale
	}
	return v
}

// RelNorm is ‖got − ref‖ / ‖ref‖ over the length of ref.
func RelNorm(got, ref []float32) float64 {
	var num, den float64
	for i := range ref {
		d := float64(got[i] - ref[i])
		num += d * d
		den += float64(ref[i]) * float64(ref[i])
	}
	return math.Sqrt(num / den)
}
