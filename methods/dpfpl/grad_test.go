package dpfpl

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
)

// randomModel is a 2-block text tower (context 12) with embeddings scaled up
// so the blocks work away from their linear regime; tokens are C rows
// "SOT X… c… . EOT" with 1..3 class tokens.
func randomModel(C, nCtx int) (*clip.Model, []int) {
	cfg := clip.Config{EmbedDim: 6,
		Vision: clip.VisionConfig{ImageSize: 8, PatchSize: 4, Width: 8, Layers: 1, Heads: 2, MLPWidth: 16},
		Text:   clip.TextConfig{ContextLength: 12, VocabSize: 20, Width: 8, Layers: 2, Heads: 2, MLPWidth: 16}}
	w := clip.Random(cfg, 3)
	for _, x := range [][]float32{w.Text.TokenEmb, w.Text.PosEmb} {
		for j := range x {
			x[j] *= 50
		}
	}
	tok := make([]int, C*12)
	for c := 0; c < C; c++ {
		row := tok[c*12:]
		row[0] = 18
		p := 1
		for ; p <= nCtx; p++ {
			row[p] = 5
		}
		for k := 0; k <= c%3; k++ {
			row[p] = 6 + c + k
			p++
		}
		row[p], row[p+1] = 3, 19
	}
	return clip.New(w), tok
}

// TestGradCheck: before the privacy mechanism both gradients are the loss's
// own (ctx = G + L), checked by finite differences.
func TestGradCheck(t *testing.T) {
	m, tokens := randomModel(4, 3)
	l, err := New(m, tokens, Config{NCtx: 3, Rank: 2, ClipNorm: 1, InitStd: 0.7, Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 3))
	img := gradcheck.Rand(rng, 5*6, 1)
	labels := []int{0, 3, 1, 2, 1}
	loss := func() float64 {
		v, _, _, err := l.Step(img, labels)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if _, _, _, err := l.Step(img, labels); err != nil {
		t.Fatal(err)
	}
	grads := l.Grads().Clone()
	for name, p := range l.Params() {
		if err := gradcheck.Check(name, p.Data, grads[name].Data, loss, 1e-2, 2e-2, 40, rng); err != nil {
			t.Error(err)
		}
	}
}

// recorded replays fixed draws by name.
type recorded map[string][]float32

func (r recorded) Gaussian(dst []float32, _ float64, what string) error {
	copy(dst, r[what])
	return nil
}

func randVec(rng *rand.Rand, n int, scale float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64() * scale)
	}
	return out
}

// matmul64 is C = A·B in float64 (A [m, k], B [k, p]).
func matmul64(a, b []float64, m, k, p int) []float64 {
	c := make([]float64, m*p)
	for i := 0; i < m; i++ {
		for j := 0; j < p; j++ {
			for q := 0; q < k; q++ {
				c[i*p+j] += a[i*k+q] * b[q*p+j]
			}
		}
	}
	return c
}

func to64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

func transpose(a []float64, m, p int) []float64 {
	out := make([]float64, len(a))
	for i := 0; i < m; i++ {
		for j := 0; j < p; j++ {
			out[j*m+i] = a[i*p+j]
		}
	}
	return out
}

// TestFactorize: U has orthonormal columns spanning L·Ω, V orthonormal rows
// spanning the rows of Uᵀ·L, and U·V + Res = L.
func TestFactorize(t *testing.T) {
	n, D, r := 5, 9, 3
	rng := rand.New(rand.NewPCG(1, 2))
	L, omega := randVec(rng, n*D, 0.3), randVec(rng, D*r, 1)
	U, V, Res := make([]float32, n*r), make([]float32, r*D), make([]float32, n*D)
	factorize(U, V, Res, L, omega, n, D, r)
	u, v := to64(U), to64(V)
	utu := matmul64(transpose(u, n, r), u, r, n, r)
	vvt := matmul64(v, transpose(v, r, D), r, D, r)
	for i := 0; i < r; i++ {
		for j := 0; j < r; j++ {
			want := 0.0
			if i == j {
				want = 1
			}
			if math.Abs(utu[i*r+j]-want) > 1e-5 || math.Abs(vvt[i*r+j]-want) > 1e-5 {
				t.Fatalf("UᵀU[%d,%d] = %g, VVᵀ[%d,%d] = %g, want %g", i, j, utu[i*r+j], i, j, vvt[i*r+j], want)
			}
		}
	}
	// span: U·Uᵀ·(L·Ω) = L·Ω
	lo := matmul64(to64(L), to64(omega), n, D, r)
	proj := matmul64(u, matmul64(transpose(u, n, r), lo, r, n, r), n, r, r)
	for i := range lo {
		if math.Abs(proj[i]-lo[i]) > 1e-5*(1+math.Abs(lo[i])) {
			t.Fatalf("L·Ω[%d] = %g is not in span(U): %g", i, lo[i], proj[i])
		}
	}
	// Vᵀ·V·(Lᵀ·U) = Lᵀ·U
	ltu := matmul64(transpose(to64(L), n, D), u, D, n, r)
	projV := matmul64(transpose(v, r, D), matmul64(v, ltu, r, D, r), D, r, r)
	for i := range ltu {
		if math.Abs(projV[i]-ltu[i]) > 1e-5*(1+math.Abs(ltu[i])) {
			t.Fatalf("Lᵀ·U[%d] = %g is not in the row span of V: %g", i, ltu[i], projV[i])
		}
	}
	uv := matmul64(u, v, n, r, D)
	for i := range L {
		if math.Abs(uv[i]+float64(Res[i])-float64(L[i])) > 1e-6 {
			t.Fatalf("U·V + Res ≠ L at %d", i)
		}
	}
}

// TestPrivatize checks the mechanism against an independent float64
// version: clipping to C of g, g·Vᵀ and Uᵀ·g, the recorded noise, and the
// local gradient in the factored form (I + U·Uᵀ)·(gU/10)·V + U·(gV/10).
func TestPrivatize(t *testing.T) {
	m, tokens := randomModel(4, 3)
	for _, c := range []struct {
		name     string
		clip, sd float64
	}{{"noise off", 1e-3, 0}, {"clipped", 1e-3, 0.05}, {"unclipped", 1e6, 0.05}} {
		n, r := 3, 2
		l, err := New(m, tokens, Config{NCtx: n, Rank: r, ClipNorm: c.clip, NoiseStd: c.sd, InitStd: 0.7, Seed: 4})
		if err != nil {
			t.Fatal(err)
		}
		D := l.D
		rng := rand.New(rand.NewPCG(5, 6))
		img := gradcheck.Rand(rng, 5*6, 1)
		if _, _, _, err := l.Step(img, []int{0, 3, 1, 2, 1}); err != nil {
			t.Fatal(err)
		}
		g := to64(l.g)
		src := recorded{"omega": randVec(rng, D*r, 1), "noise_u": randVec(rng, n*r, c.sd), "noise_v": randVec(rng, r*D, c.sd)}
		if err := l.Privatize(src); err != nil {
			t.Fatal(err)
		}
		U, V := to64(l.U), to64(l.V)
		clip := func(x []float64) []float64 {
			var ss float64
			for _, v := range x {
				ss += v * v
			}
			if nrm := math.Sqrt(ss); c.sd > 0 && nrm > c.clip {
				for i := range x {
					x[i] *= c.clip / nrm
				}
			}
			return x
		}
		wantG := clip(append([]float64(nil), g...))
		gu := clip(matmul64(g, transpose(V, r, D), n, D, r))
		gv := clip(matmul64(transpose(U, n, r), g, r, n, D))
		if c.sd > 0 {
			for i, v := range src["noise_u"] {
				gu[i] += float64(v)
			}
			for i, v := range src["noise_v"] {
				gv[i] += float64(v)
			}
		}
		a, b := make([]float64, len(gu)), make([]float64, len(gv))
		for i := range gu {
			a[i] = gu[i] / 10
		}
		for i := range gv {
			b[i] = gv[i] / 10
		}
		av := matmul64(a, V, n, r, D)
		uut := matmul64(U, transpose(U, n, r), n, r, n)
		wantL := matmul64(uut, av, n, n, D)
		ub := matmul64(U, b, n, r, D)
		for i := range wantL {
			wantL[i] += av[i] + ub[i]
		}
		cmp := func(what string, got []float32, want []float64) {
			var md, mx float64
			for i := range want {
				md = math.Max(md, math.Abs(float64(got[i])-want[i]))
				mx = math.Max(mx, math.Abs(want[i]))
			}
			if mx == 0 || md > 1e-5*mx {
				t.Errorf("%s: %s max |Δ| %g of max %g", c.name, what, md, mx)
			}
		}
		cmp("global gradient", l.gGlobal.Data, wantG)
		cmp("gU", l.GU, gu)
		cmp("gV", l.GV, gv)
		cmp("local gradient", l.gLocal.Data, wantL)
		if c.name == "clipped" && math.Abs(norm(l.gGlobal.Data)-c.clip) > 1e-6*c.clip {
			t.Errorf("clipped global gradient has norm %g, want %g", norm(l.gGlobal.Data), c.clip)
		}
	}
}
