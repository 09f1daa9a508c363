package nn

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/internal/gradcheck"
)

// TestLayerNormMatchesFloat64 compares the float32 kernels with a float64
// evaluation of the same formula, at widths with and without a vector tail
// and with enough rows to be split over the CPUs.
func TestLayerNormMatchesFloat64(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for _, C := range []int{1, 7, 13, 768} {
		N := 150
		x, w, b := gradcheck.Rand(rng, N*C, 3), gradcheck.Rand(rng, C, 1), gradcheck.Rand(rng, C, 1)
		for i := range x {
			x[i] += 5 // a large mean: cancellation in the variance
		}
		out, mean, rstd := make([]float32, N*C), make([]float32, N), make([]float32, N)
		LayerNormForward(out, mean, rstd, x, w, b, N, C)
		worst := 0.0
		for i := 0; i < N; i++ {
			var m, v float64
			for _, xv := range x[i*C : i*C+C] {
				m += float64(xv)
			}
			m /= float64(C)
			for _, xv := range x[i*C : i*C+C] {
				v += (float64(xv) - m) * (float64(xv) - m)
			}
			rs := 1 / math.Sqrt(v/float64(C)+LayerNormEps)
			for j := 0; j < C; j++ {
				want := (float64(x[i*C+j])-m)*rs*float64(w[j]) + float64(b[j])
				worst = max(worst, math.Abs(float64(out[i*C+j])-want)/(1+math.Abs(want)))
			}
			worst = max(worst, math.Abs(float64(rstd[i])-rs)/rs)
		}
		if worst > 2e-6 {
			t.Errorf("C=%d: LayerNorm differs from float64 by %.3g relative", C, worst)
		}
	}
}

// TestLayerNormBackwardTails runs the gradient check at a width with a
// vector tail, over enough rows for the parallel split.
func TestLayerNormBackwardTails(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 1))
	N, C := 130, 13
	x, w, b := gradcheck.Rand(rng, N*C, 2), gradcheck.Rand(rng, C, 1), gradcheck.Rand(rng, C, 1)
	r := gradcheck.Rand(rng, N*C, 1)
	out, mean, rstd := make([]float32, N*C), make([]float32, N), make([]float32, N)
	loss := func() float64 { LayerNormForward(out, mean, rstd, x, w, b, N, C); return gradcheck.Dot(out, r) }
	loss()
	dx, dw, db := make([]float32, N*C), make([]float32, C), make([]float32, C)
	LayerNormBackward(dx, dw, db, r, x, mean, rstd, w, N, C)
	check(t, "dx", x, dx, loss, rng)
	check(t, "dw", w, dw, loss, rng)
	check(t, "db", b, db, loss, rng)
}

func TestAddScaledInto(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 1))
	for _, n := range []int{0, 5, 1 << 17} {
		dst, src := gradcheck.Rand(rng, n+3, 1), gradcheck.Rand(rng, n, 1)
		want := append([]float32(nil), dst...)
		for i, v := range src {
			want[i] += 0.5 * v
		}
		AddScaledInto(dst, src, 0.5)
		for i := range want {
			if dst[i] != want[i] {
				t.Fatalf("n=%d: dst[%d] = %v, want %v", n, i, dst[i], want[i])
			}
		}
	}
}
