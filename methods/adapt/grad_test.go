package adapt

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/tensor"
)

// TestScoresSoftmaxMixBackward checks the domain weighting and the mixing
// layers by finite differences of L = ⟨mix(softmax(scores(q, k)), u), r⟩.
func TestScoresSoftmaxMixBackward(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 1))
	const B, n, D, C, E = 3, 4, 6, 5, 7
	const tau = 0.5
	q, k, u := gradcheck.Rand(rng, B*D, 1), gradcheck.Rand(rng, B*n*D, 1), gradcheck.Rand(rng, n*C*E, 1)
	r := gradcheck.Rand(rng, B*C*E, 1)
	a, w, m := make([]float32, B*n), make([]float32, B*n), make([]float32, B*C*E)
	qn, kn, qnorm, knorm := make([]float32, B*D), make([]float32, B*n*D), make([]float32, B), make([]float32, B*n)
	loss := func() float64 {
		scoresForward(a, qn, kn, qnorm, knorm, q, k, B, n, D, tau)
		softmaxForward(w, a, B, n)
		mixForward(m, w, u, B, n, C, E)
		return gradcheck.Dot(m, r)
	}
	loss()
	dw, du, da := make([]float32, B*n), make([]float32, n*C*E), make([]float32, B*n)
	dq, dk := make([]float32, B*D), make([]float32, B*n*D)
	mixBackward(dw, du, r, w, u, B, n, C, E)
	softmaxBackward(da, dw, w, B, n)
	scoresBackward(dq, dk, da, qn, kn, qnorm, knorm, B, n, D, tau, nil)
	for _, c := range []struct {
		name    string
		p, grad []float32
	}{{"q", q, dq}, {"k", k, dk}, {"u", u, du}} {
		if err := gradcheck.Check(c.name, c.p, c.grad, loss, 1e-3, 1e-2, 60, rng); err != nil {
			t.Error(err)
		}
	}
}

// TestAdaLNBackward checks AdaLN with non-zero weights: gradients with
// respect to its input, its condition and its weights.
func TestAdaLNBackward(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 1))
	const B, C, E, L = 2, 3, 5, 3
	h, cond := gradcheck.Rand(rng, B*C*E, 1), gradcheck.Rand(rng, B*E, 1)
	r := gradcheck.Rand(rng, B*C*E, 1)
	var W, b, dW, db [][]float32
	for l := 0; l < L; l++ {
		W, b = append(W, gradcheck.Rand(rng, 2*E*E, 0.5)), append(b, gradcheck.Rand(rng, 2*E, 0.5))
		dW, db = append(dW, make([]float32, 2*E*E)), append(db, make([]float32, 2*E))
	}
	var a adaLN
	loss := func() float64 { return gradcheck.Dot(a.forward(h, cond, W, b, B, C, E), r) }
	loss()
	dh, dcond := make([]float32, B*C*E), make([]float32, B*E)
	a.backward(dh, dcond, r, W, dW, db)
	checks := []struct {
		name    string
		p, grad []float32
	}{{"h", h, dh}, {"cond", cond, dcond}}
	for l := 0; l < L; l++ {
		checks = append(checks, struct {
			name    string
			p, grad []float32
		}{fmt.Sprintf("W%d", l), W[l], dW[l]}, struct {
			name    string
			p, grad []float32
		}{fmt.Sprintf("b%d", l), b[l], db[l]})
	}
	for _, c := range checks {
		if err := gradcheck.Check(c.name, c.p, c.grad, loss, 1e-2, 2e-2, 40, rng); err != nil {
			t.Error(err)
		}
	}
}

// TestAdaLNZeroIsIdentity: the zero-initialised AdaLN leaves the features
// unchanged.
func TestAdaLNZeroIsIdentity(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 1))
	const B, C, E = 2, 3, 4
	h, cond := gradcheck.Rand(rng, B*C*E, 1), gradcheck.Rand(rng, B*E, 1)
	W, b := [][]float32{make([]float32, 2*E*E)}, [][]float32{make([]float32, 2*E)}
	var a adaLN
	out := a.forward(h, cond, W, b, B, C, E)
	for i := range h {
		if out[i] != h[i] {
			t.Fatalf("out[%d] = %g, want %g", i, out[i], h[i])
		}
	}
}

// tinyLearner is a learner on a random tiny CLIP (vision and text 2 blocks)
// with class prompts of C classes, and cached prefixes of B images.
func tinyLearner(t *testing.T, cfg Config, C, B int) (*Learner, []float32) {
	t.Helper()
	m := tinyModel()
	m.W.LogitScale = 1
	l, err := NewLearner(m, tinyTokens(m, cfg.NCtx, C), cfg)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(2, 2))
	px := gradcheck.Rand(rng, B*3*8*8, 1)
	return l, clip.ImagePrefix(m, 1, px, B, nil)
}

// tinyModel is a random tiny CLIP (vision and text 2 blocks, 8×8 images)
// with its token and position embeddings scaled up: tiny random embeddings
// make finite differences noisy.
func tinyModel() *clip.Model {
	c := clip.Config{EmbedDim: 6,
		Vision: clip.VisionConfig{ImageSize: 8, PatchSize: 4, Width: 8, Layers: 2, Heads: 2, MLPWidth: 16},
		Text:   clip.TextConfig{ContextLength: 10, VocabSize: 20, Width: 8, Layers: 2, Heads: 2, MLPWidth: 16}}
	w := clip.Random(c, 9)
	for _, x := range [][]float32{w.Text.TokenEmb, w.Text.PosEmb} {
		for j := range x {
			x[j] *= 30
		}
	}
	return clip.New(w)
}

// tinyTokens are the class prompts [C, ctx] of tinyModel: SOT, nCtx
// placeholders, the class token, EOT.
func tinyTokens(m *clip.Model, nCtx, C int) []int {
	var tokens []int
	for cl := 0; cl < C; cl++ {
		row := make([]int, m.W.Config.Text.ContextLength)
		row[0] = 17
		for j := 1; j <= nCtx; j++ {
			row[j] = 3
		}
		row[nCtx+1] = 4 + cl
		row[nCtx+2] = 19 // EOT: the largest id
		tokens = append(tokens, row...)
	}
	return tokens
}

// TestStepGradients checks the whole step — the visual prompts through the
// encoder and the weighting, the own text prompt through the text encoder,
// AdaLN — against finite differences of the returned loss, with and
// without AdaLN.
func TestStepGradients(t *testing.T) {
	for _, ada := range []bool{false, true} {
		t.Run(fmt.Sprintf("adaln=%v", ada), func(t *testing.T) {
			cfg := Config{Domains: 3, NCtx: 2, InitStd: 0.5, VisualStd: 1, Tau: 0.5, Lambda: 1, AdaLN: ada, AdaLNLayers: 2, Seed: 1}
			const C, B, own = 4, 3, 1
			l, x0 := tinyLearner(t, cfg, C, B)
			P := InitParams(cfg, l.Dt, l.Dv, l.E)
			rng := rand.New(rand.NewPCG(6, 1))
			if ada { // non-zero AdaLN so every path carries gradient
				for name, p := range P {
					if Averaged(name) && name != ParamVisual {
						copy(p.Data, gradcheck.Rand(rng, len(p.Data), 0.3))
					}
				}
			}
			G := zerosLike(P)
			labels := []int{0, 3, 2}
			loss := func() float64 {
				g := zerosLike(P)
				v, _, _, err := l.Step(P, g, x0, labels, own)
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			if _, _, _, err := l.Step(P, G, x0, labels, own); err != nil {
				t.Fatal(err)
			}
			for name, p := range P {
				g := G[name]
				if Relayed(name) && name != TextName(own) {
					for _, v := range g.Data {
						if v != 0 {
							t.Fatalf("external prompt %s has gradient %g", name, v)
						}
					}
					continue
				}
				if err := gradcheck.Check(name, p.Data, g.Data, loss, 1e-2, 3e-2, 30, rng); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// TestStepRejectsBadInput: wrong domains, labels and parameters are errors.
func TestStepRejectsBadInput(t *testing.T) {
	cfg := Config{Domains: 2, NCtx: 2, InitStd: 0.02, VisualStd: 0.02, Tau: 0.1, Lambda: 1}
	l, x0 := tinyLearner(t, cfg, 3, 2)
	P := InitParams(cfg, l.Dt, l.Dv, l.E)
	G := zerosLike(P)
	if _, _, _, err := l.Step(P, G, x0, []int{0, 1}, 2); err == nil {
		t.Error("domain 2 of 2 accepted")
	}
	if _, _, _, err := l.Step(P, G, x0, []int{0, 3}, 0); err == nil {
		t.Error("label 3 of 3 classes accepted")
	}
	bad := P.Clone()
	bad[ParamVisual] = tensor.New(3, l.Dv)
	if _, _, _, err := l.Step(bad, G, x0, []int{0, 1}, 0); err == nil {
		t.Error("3 visual prompts for 2 domains accepted")
	}
}
