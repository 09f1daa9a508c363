package fedot

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/tensor"
)

// randomX returns X [r, s, s] = I + noise: a non-trivial rotation.
func randomX(rng *rand.Rand, r, s int, scale float32) []float32 {
	x := gradcheck.Rand(rng, r*s*s, scale)
	for j := 0; j < r; j++ {
		for k := 0; k < s; k++ {
			x[j*s*s+k*s+k]++
		}
	}
	return x
}

// TestLUMatchesDirect: the factorisation in use (OpenBLAS, or the Go one)
// and the pure-Go one both solve A x = b and Aᵀ x = b to float64 accuracy.
func TestLUMatchesDirect(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n, nrhs = 37, 5
	a := make([]float64, n*n)
	for i := range a {
		a[i] = rng.NormFloat64()
	}
	b := make([]float64, n*nrhs)
	for i := range b {
		b[i] = rng.NormFloat64()
	}
	// apply computes op(A) x for column-major A.
	apply := func(trans bool, x []float64) []float64 {
		out := make([]float64, n*nrhs)
		for r := 0; r < nrhs; r++ {
			for i := 0; i < n; i++ {
				var s float64
				for k := 0; k < n; k++ {
					aik := a[i+k*n]
					if trans {
						aik = a[k+i*n]
					}
					s += aik * x[r*n+k]
				}
				out[r*n+i] = s
			}
		}
		return out
	}
	for _, trans := range []bool{false, true} {
		var f LU
		if err := f.Factor(a, n); err != nil {
			t.Fatal(err)
		}
		x := append([]float64(nil), b...)
		if err := f.Solve(trans, x, nrhs, n); err != nil {
			t.Fatal(err)
		}
		g := append([]float64(nil), a...)
		piv := make([]int32, n)
		if err := factorGo(g, piv, n); err != nil {
			t.Fatal(err)
		}
		y := append([]float64(nil), b...)
		solveGo(trans, g, piv, n, y, nrhs, n)
		for name, sol := range map[string][]float64{"in use": x, "pure Go": y} {
			back := apply(trans, sol)
			for i := range back {
				if math.Abs(back[i]-b[i]) > 1e-10 {
					t.Fatalf("%s LU, trans %v: residual %g at %d", name, trans, back[i]-b[i], i)
				}
			}
		}
	}
}

// TestCayleyOrthogonal: W = Cayley(X) is orthogonal and block-diagonal, and
// Forward applies it.
func TestCayleyOrthogonal(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, r := range []int{1, 4} {
		const d, B = 32, 6
		s := d / r
		c, err := NewCayley(d, r)
		if err != nil {
			t.Fatal(err)
		}
		x := randomX(rng, r, s, 0.5)
		if err := c.Factor(x); err != nil {
			t.Fatal(err)
		}
		w := make([]float32, d*d)
		if err := c.Matrix(w); err != nil {
			t.Fatal(err)
		}
		if e := orthogonalityError(w, d); e > 1e-5 {
			t.Errorf("r=%d: ‖WᵀW − I‖max = %g", r, e)
		}
		for i := 0; i < d; i++ {
			for k := 0; k < d; k++ {
				if i/s != k/s && w[i*d+k] != 0 {
					t.Fatalf("r=%d: W[%d,%d] = %g outside the diagonal blocks", r, i, k, w[i*d+k])
				}
			}
		}
		h := gradcheck.Rand(rng, B*d, 1)
		out := make([]float32, B*d)
		if err := c.Forward(out, h, B); err != nil {
			t.Fatal(err)
		}
		for b := 0; b < B; b++ {
			for i := 0; i < d; i++ {
				var want float64
				for k := 0; k < d; k++ {
					want += float64(w[i*d+k]) * float64(h[b*d+k])
				}
				if math.Abs(want-float64(out[b*d+i])) > 1e-5 {
					t.Fatalf("r=%d: Forward row %d [%d] = %g, W h = %g", r, b, i, out[b*d+i], want)
				}
			}
		}
	}
	// X = I gives W = I.
	c, _ := NewCayley(8, 2)
	x := make([]float32, 2*4*4)
	IdentityX(x, 2, 4)
	if err := c.Factor(x); err != nil {
		t.Fatal(err)
	}
	w := make([]float32, 64)
	if err := c.Matrix(w); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		for k := 0; k < 8; k++ {
			want := float32(0)
			if i == k {
				want = 1
			}
			if w[i*8+k] != want {
				t.Fatalf("Cayley(I)[%d,%d] = %g", i, k, w[i*8+k])
			}
		}
	}
}

// orthogonalityError is max |WᵀW − I| for W [d, d].
func orthogonalityError(w []float32, d int) float64 {
	var worst float64
	for i := 0; i < d; i++ {
		for j := 0; j < d; j++ {
			var s float64
			for k := 0; k < d; k++ {
				s += float64(w[k*d+i]) * float64(w[k*d+j])
			}
			if i == j {
				s--
			}
			worst = math.Max(worst, math.Abs(s))
		}
	}
	return worst
}

// TestCayleyGrad: finite differences of L = Σ Forward(h) ⊙ g with respect
// to X, for one and for several blocks.
func TestCayleyGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, r := range []int{1, 3} {
		const B = 5
		d := 12
		s := d / r
		c, err := NewCayley(d, r)
		if err != nil {
			t.Fatal(err)
		}
		x := randomX(rng, r, s, 0.4)
		h, g := gradcheck.Rand(rng, B*d, 1), gradcheck.Rand(rng, B*d, 1)
		out := make([]float32, B*d)
		loss := func() float64 {
			if err := c.Factor(x); err != nil {
				t.Fatal(err)
			}
			if err := c.Forward(out, h, B); err != nil {
				t.Fatal(err)
			}
			return gradcheck.Dot(out, g)
		}
		loss()
		dx := make([]float32, len(x))
		if err := c.Backward(dx, g); err != nil {
			t.Fatal(err)
		}
		if err := gradcheck.Check("x", x, dx, loss, 1e-3, 1e-2, len(x), rng); err != nil {
			t.Errorf("r=%d: %v", r, err)
		}
		// The gradient is skew-symmetric per block (only R = ½(X − Xᵀ) matters).
		for j := 0; j < r; j++ {
			for p := 0; p < s; p++ {
				for q := 0; q < s; q++ {
					a, b := dx[j*s*s+p*s+q], dx[j*s*s+q*s+p]
					if math.Abs(float64(a+b)) > 1e-5 {
						t.Fatalf("r=%d: dX not skew at block %d (%d,%d): %g, %g", r, j, p, q, a, b)
					}
				}
			}
		}
	}
}

// TestHeadGrad: the normalised-linear head's gradients with respect to the
// features and the classifier, with and without row normalisation.
func TestHeadGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const B, C, d = 4, 5, 9
	for _, cosine := range []bool{false, true} {
		hd := Head{Cosine: cosine}
		h, w := gradcheck.Rand(rng, B*d, 1), gradcheck.Rand(rng, C*d, 1)
		g := gradcheck.Rand(rng, B*C, 1)
		logits := make([]float32, B*C)
		loss := func() float64 {
			hd.Forward(logits, h, w, B, C, d, 3)
			return gradcheck.Dot(logits, g)
		}
		loss()
		dh, dw := make([]float32, B*d), make([]float32, C*d)
		hd.Backward(dh, dw, g)
		if err := gradcheck.Check("h", h, dh, loss, 1e-3, 1e-2, B*d, rng); err != nil {
			t.Errorf("cosine %v: %v", cosine, err)
		}
		if err := gradcheck.Check("w", w, dw, loss, 1e-3, 1e-2, C*d, rng); err != nil {
			t.Errorf("cosine %v: %v", cosine, err)
		}
		// Backward accumulates.
		loss() // the state of the unperturbed point
		dh2, dw2 := append([]float32(nil), dh...), append([]float32(nil), dw...)
		hd.Backward(dh2, dw2, g)
		for i := range dh {
			if math.Abs(float64(dh2[i]-2*dh[i])) > 1e-5*(1+math.Abs(float64(dh[i]))) {
				t.Fatalf("cosine %v: dh does not accumulate", cosine)
			}
		}
	}
}

// TestModelStepGrad: the whole loss (local map, head, cross entropy) of
// every variant against finite differences of every parameter.
func TestModelStepGrad(t *testing.T) {
	const d, K, B = 8, 6, 5
	classes := []int{4, 1, 3}
	labels := []int{0, 2, 1, 1, 0}
	for _, s := range []*Settings{
		{Variant: VariantFedOT, Blocks: 1},
		{Variant: VariantFedOT, Blocks: 2, NormalizeClassifier: true},
		{Variant: VariantFedLT, Blocks: 1},
		{Variant: VariantFedAdapter, Blocks: 1},
	} {
		rng := rand.New(rand.NewPCG(9, 10))
		m, err := NewModel(s, d, K, 2)
		if err != nil {
			t.Fatal(err)
		}
		p := tensor.Named{}
		for name, shape := range s.Shapes(d, K) {
			p[name] = tensor.New(shape...)
		}
		s.initLocal(p, rng)
		uniform(p[ParamClassifier].Data, rng, 1)
		for name, tt := range p { // move off the initial point
			if name != ParamClassifier {
				for i := range tt.Data {
					tt.Data[i] += float32(rng.NormFloat64() * 0.2)
				}
			}
		}
		h := gradcheck.Rand(rng, B*d, 1)
		loss := func() float64 {
			l, _, err := m.Step(p, h, labels, classes)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		loss()
		grads := m.Grads.Clone()
		for name, tt := range p {
			if err := gradcheck.Check(name, tt.Data, grads[name].Data, loss, 1e-3, 2e-2, 40, rng); err != nil {
				t.Errorf("%s blocks %d: %v", s.Variant, s.Blocks, err)
			}
		}
		// Rows of classes outside the label space get no gradient.
		g := grads[ParamClassifier].Data
		for _, c := range []int{0, 2, 5} {
			for k := 0; k < d; k++ {
				if g[c*d+k] != 0 {
					t.Fatalf("%s: class %d outside the space has gradient", s.Variant, c)
				}
			}
		}
	}
}
