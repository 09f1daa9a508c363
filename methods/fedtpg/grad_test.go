package fedtpg

import (
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/internal/methodtest"
	"github.com/pfedmma/pfedmma/tensor"
)

// randomParams draws every generator tensor of cfg away from its identity
// values (LayerNorm weights 1 ± 0.3, biases ±0.3, matrices ±scale).
func randomParams(cfg GenConfig, rng *rand.Rand, scale float32) (p, g tensor.Named) {
	p, g = tensor.Named{}, tensor.Named{}
	shapes := cfg.Shapes()
	for _, name := range slices.Sorted(maps.Keys(shapes)) {
		shape := shapes[name]
		t := tensor.New(shape...)
		switch {
		case strings.HasSuffix(name, "norm.weight"), strings.HasSuffix(name, "norm_context.weight"), strings.HasSuffix(name, "net.0.weight"):
			for i, v := range gradcheck.Rand(rng, len(t.Data), 0.3) {
				t.Data[i] = 1 + v
			}
		case strings.HasSuffix(name, "bias"):
			copy(t.Data, gradcheck.Rand(rng, len(t.Data), 0.3))
		default:
			copy(t.Data, gradcheck.Rand(rng, len(t.Data), scale))
		}
		p[name], g[name] = t, tensor.New(shape...)
	}
	return p, g
}

// TestGEGLUGrad: finite differences of L = Σ GEGLU(u) ⊙ r.
func TestGEGLUGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	const n, F = 3, 5
	u, r := gradcheck.Rand(rng, n*2*F, 2), gradcheck.Rand(rng, n*F, 1)
	out := make([]float32, n*F)
	loss := func() float64 { gegluForward(out, u, n, F); return gradcheck.Dot(out, r) }
	du := make([]float32, n*2*F)
	gegluBackward(du, r, u, n, F)
	if err := gradcheck.Check("u", u, du, loss, 1e-3, 1e-2, n*2*F, rng); err != nil {
		t.Error(err)
	}
	// GELU(0) = 0, GELU(x) → x for large x, the erf form at 1: Φ(1) = 0.8413447
	if gelu(0) != 0 || gelu(10) < 9.999999 || gelu(1) < 0.84134 || gelu(1) > 0.84135 {
		t.Errorf("gelu: %v %v %v", gelu(0), gelu(10), gelu(1))
	}
}

// TestLayerGrads: each layer's input and parameter gradients by finite
// differences of L = Σ layer(x) ⊙ r — the cross-attention with separate
// q/k/v projections (D ≠ E) and in_proj_weight (D = E), the feed-forward and
// a self-attention layer.
func TestLayerGrads(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	const E, Q, K = 8, 3, 4
	for _, D := range []int{6, E} {
		cfg := GenConfig{NCtx: Q, DCtx: 1, Depth: 1, CrossHeads: 2, SelfHeads: 4, FFMult: 2, E: E, D: D}
		p, g := randomParams(cfg, rng, 0.6)
		gen, err := NewGenerator(cfg, p, g)
		if err != nil {
			t.Fatal(err)
		}
		xq, xkv := gradcheck.Rand(rng, Q*E, 1), gradcheck.Rand(rng, K*D, 1)
		r := gradcheck.Rand(rng, Q*E, 1)
		check := func(what string, x, dx []float32, loss func() float64) {
			t.Helper()
			if err := gradcheck.Check(what, x, dx, loss, 1e-2, 2e-2, 40, rng); err != nil {
				t.Errorf("D %d: %v", D, err)
			}
		}
		params := func(prefix string, loss func() float64) {
			t.Helper()
			for _, name := range slices.Sorted(maps.Keys(p)) {
				if strings.HasPrefix(name, Prefix+prefix) {
					check(name, p[name].Data, g[name].Clone().Data, loss)
				}
			}
		}

		// cross-attention: out = MHA(xq, xkv, xkv)
		a := &gen.cross
		lossA := func() float64 { return gradcheck.Dot(a.forward(xq, Q, xkv, K), r) }
		lossA()
		gen.zeroGrads()
		dq, dkv := a.backward(r, true)
		dq, dkv = slices.Clone(dq), slices.Clone(dkv)
		check("cross xq", xq, dq, lossA)
		check("cross xkv", xkv, dkv, lossA)
		params(nameCross+"fn.", lossA)

		// feed-forward
		f := &gen.crossFF
		lossF := func() float64 { return gradcheck.Dot(f.forward(xq, Q), r) }
		lossF()
		gen.zeroGrads()
		dx := slices.Clone(f.backward(r))
		check("ff x", xq, dx, lossF)
		params(nameCrossFF, lossF)

		// self-attention layer (pre-norm, both residuals)
		l := &gen.layers[0]
		lossS := func() float64 { return gradcheck.Dot(l.forward(xq, Q, E), r) }
		lossS()
		gen.zeroGrads()
		dx = slices.Clone(l.backward(r, Q, E))
		check("self x", xq, dx, lossS)
		params(selfName(0), lossS)
	}
}

// TestGeneratorGrad: every generator tensor by finite differences of
// L = Σ Generator(T) ⊙ r, at depth 0 with D ≠ E and at depth 2 with D = E.
func TestGeneratorGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	for _, c := range []struct{ D, depth int }{{6, 0}, {8, 2}} {
		cfg := GenConfig{NCtx: 3, DCtx: 1, Depth: c.depth, CrossHeads: 2, SelfHeads: 2, FFMult: 2, E: 8, D: c.D}
		p, g := randomParams(cfg, rng, 0.6)
		gen, err := NewGenerator(cfg, p, g)
		if err != nil {
			t.Fatal(err)
		}
		const K = 5
		T := gradcheck.Rand(rng, K*c.D, 1)
		r := gradcheck.Rand(rng, cfg.Queries()*cfg.E, 1)
		loss := func() float64 { return gradcheck.Dot(gen.Forward(T, K), r) }
		loss()
		gen.Backward(r)
		grads := g.Clone()
		if len(p) != len(cfg.Shapes()) || (c.depth == 0) != (len(p) == 17) {
			t.Fatalf("depth %d: %d tensors", c.depth, len(p))
		}
		for _, name := range slices.Sorted(maps.Keys(p)) {
			if err := gradcheck.Check(name, p[name].Data, grads[name].Data, loss, 1e-2, 2e-2, 40, rng); err != nil {
				t.Errorf("D %d depth %d: %v", c.D, c.depth, err)
			}
		}
	}
}

// randomModel is a 2-block text tower (context 12, width 8, embed 6) with
// embeddings scaled by embScale (the generated vectors, O(1), take their
// positions: the smaller the scale, the more they move the features);
// prompt rows "SOT X… c… . EOT" with 1..3 class tokens, and their names.
func randomModel(t testing.TB, C, nCtx int, embScale float32) (*clip.Model, []int, []int) {
	m, tok := methodtest.TinyCLIP{EmbedDim: 6, VisionLayers: 1, TextLayers: 2, EmbScale: embScale}.Prompts(C, nCtx)
	names, err := NameRows(tok, 12, nCtx)
	if err != nil {
		t.Fatal(err)
	}
	return m, tok, names
}

// TestStepGrad: the whole loss (generator, frozen text encoder, cosine
// head, cross entropy) with respect to every generator tensor.
func TestStepGrad(t *testing.T) {
	for _, depth := range []int{0, 1} {
		m, tokens, names := randomModel(t, 4, 3, 3)
		l, err := New(m, tokens, names, Config{NCtx: 3, DCtx: 1, Depth: depth, CrossHeads: 2, SelfHeads: 2, FFMult: 2, InitStd: 1, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(4, uint64(depth)))
		p, _ := randomParams(l.gen.Cfg, rng, 0.8)
		for name, tt := range p {
			copy(l.p[name].Data, tt.Data)
		}
		img := gradcheck.Rand(rng, 5*6, 1)
		labels := []int{0, 3, 1, 2, 1}
		loss := func() float64 {
			v, _, _, err := l.Step(img, labels)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		loss()
		grads := l.g.Clone()
		// Tensors deep in the generator move the loss little: their float32
		// finite differences are judged against the largest gradient of all
		// tensors (1% of it), not of their own.
		var scale float64
		for _, gr := range grads {
			for _, v := range gr.Data {
				scale = math.Max(scale, math.Abs(float64(v)))
			}
		}
		const eps = 1e-2
		for _, name := range slices.Sorted(maps.Keys(l.p)) {
			x, ga := l.p[name].Data, grads[name].Data
			for k := 0; k < 24; k++ {
				i := rng.IntN(len(x))
				old := x[i]
				x[i] = old + eps
				lp := loss()
				x[i] = old - eps
				lm := loss()
				x[i] = old
				num := (lp - lm) / (2 * eps)
				if e := math.Abs(num-float64(ga[i])) / (1e-2*scale + math.Abs(num)); !(e <= 3e-2) {
					t.Errorf("depth %d: %s[%d]: numeric %.6g vs analytic %.6g (relative error %.3g)", depth, name, i, num, ga[i], e)
				}
			}
		}
	}
}
