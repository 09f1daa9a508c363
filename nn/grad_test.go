package nn

import (
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/internal/gradcheck"
)

const (
	fdEps = 1e-2
	fdTol = 2e-2
	fdN   = 40
)

func check(t *testing.T, name string, p, g []float32, loss func() float64, rng *rand.Rand) {
	t.Helper()
	if err := gradcheck.Check(name, p, g, loss, fdEps, fdTol, fdN, rng); err != nil {
		t.Fatal(err)
	}
}

func TestLayerNormBackward(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	N, C := 5, 16
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

func TestLinearBackward(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 1))
	N, IC, OC := 6, 8, 5
	x, w, b := gradcheck.Rand(rng, N*IC, 1), gradcheck.Rand(rng, OC*IC, 1), gradcheck.Rand(rng, OC, 1)
	r := gradcheck.Rand(rng, N*OC, 1)
	out := make([]float32, N*OC)
	loss := func() float64 { LinearForward(out, x, w, b, N, IC, OC); return gradcheck.Dot(out, r) }
	dx, dw, db := make([]float32, N*IC), make([]float32, OC*IC), make([]float32, OC)
	LinearBackward(dx, dw, db, r, x, w, N, IC, OC)
	check(t, "dx", x, dx, loss, rng)
	check(t, "dw", w, dw, loss, rng)
	check(t, "db", b, db, loss, rng)
}

func TestMatMulBackward(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 1))
	N, IC, OC := 4, 7, 3
	x, p := gradcheck.Rand(rng, N*IC, 1), gradcheck.Rand(rng, IC*OC, 1)
	r := gradcheck.Rand(rng, N*OC, 1)
	out := make([]float32, N*OC)
	loss := func() float64 { MatMulForward(out, x, p, N, IC, OC); return gradcheck.Dot(out, r) }
	dx, dp := make([]float32, N*IC), make([]float32, IC*OC)
	MatMulBackward(dx, dp, r, x, p, N, IC, OC)
	check(t, "dx", x, dx, loss, rng)
	check(t, "dproj", p, dp, loss, rng)
}

func TestActivationsBackward(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 1))
	n := 50
	x := gradcheck.Rand(rng, n, 3)
	for i := range x { // keep ReLU inputs away from the kink
		if x[i] > -0.05 && x[i] < 0.05 {
			x[i] = 0.5
		}
	}
	r := gradcheck.Rand(rng, n, 1)
	out := make([]float32, n)
	gelu := func() float64 { QuickGELUForward(out, x, n); return gradcheck.Dot(out, r) }
	dx := make([]float32, n)
	QuickGELUBackward(dx, r, x, n)
	check(t, "quickgelu", x, dx, gelu, rng)
	relu := func() float64 { ReLUForward(out, x, n); return gradcheck.Dot(out, r) }
	relu()
	dx = make([]float32, n)
	ReLUBackward(dx, r, out, n)
	check(t, "relu", x, dx, relu, rng)
}

func TestAttentionBackward(t *testing.T) {
	for _, tc := range []struct {
		name   string
		causal bool
		pooled bool
	}{{"full", false, false}, {"causal", true, false}, {"pooled", false, true}, {"pooled-causal", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, 1))
			B, T, H, Dh := 2, 5, 2, 4
			D := H * Dh
			tq, qs := T, 3*D
			mask := Mask{Causal: tc.causal}
			if tc.pooled {
				tq, qs = 1, D
				mask.QPos = []int{3, 1}
			}
			s := AttentionShape{B: B, Tq: tq, Tk: T, H: H, Dh: Dh, QStride: qs, KVStride: 3 * D}
			kv := gradcheck.Rand(rng, B*T*3*D, 1) // k at D, v at 2D, q at 0 when not pooled
			q := kv
			if tc.pooled {
				q = gradcheck.Rand(rng, B*D, 1)
			}
			r := gradcheck.Rand(rng, B*tq*D, 1)
			out, probs := make([]float32, B*tq*D), make([]float32, B*H*tq*T)
			loss := func() float64 {
				AttentionForward(out, probs, q, kv[D:], kv[2*D:], s, mask)
				return gradcheck.Dot(out, r)
			}
			loss()
			dkv := make([]float32, len(kv))
			dq := dkv
			if tc.pooled {
				dq = make([]float32, len(q))
			}
			AttentionBackward(dq, dkv[D:], dkv[2*D:], r, probs, q, kv[D:], kv[2*D:], make([]float32, B*H*tq*T), s)
			check(t, "dqkv", kv, dkv, loss, rng)
			if tc.pooled {
				check(t, "dq", q, dq, loss, rng)
			}
			if tc.causal && !tc.pooled {
				// query 0 sees only key 0
				for h := 0; h < H; h++ {
					if p := probs[h*T*T : h*T*T+T]; p[0] != 1 || p[1] != 0 {
						t.Fatalf("causal mask: first query row %v", p)
					}
				}
			}
		})
	}
}
