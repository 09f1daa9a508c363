package clip

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/nn"
)

// linAdapter is a test adapter y = h·Aᵀ with dh = dout·A·s (s mimics a
// gradient-scaled branch).
type linAdapter struct {
	A, GA []float32 // [D, D]
	D     int
	h     []float32
}

func (a *linAdapter) Forward(out, h []float32, N int) {
	a.h = append(a.h[:0], h[:N*a.D]...)
	tmp := make([]float32, N*a.D)
	nn.LinearForward(tmp, a.h, a.A, nil, N, a.D, a.D)
	for i, v := range tmp {
		out[i] += v
	}
}

func (a *linAdapter) Backward(dh, dout []float32, N int) {
	nn.LinearBackward(dh, a.GA, nil, dout, a.h, a.A, N, a.D, a.D)
}

func tinyConfig() Config {
	return Config{EmbedDim: 6,
		Vision: VisionConfig{ImageSize: 8, PatchSize: 4, Width: 8, Layers: 2, Heads: 2, MLPWidth: 16},
		Text:   TextConfig{ContextLength: 6, VocabSize: 20, Width: 8, Layers: 2, Heads: 2, MLPWidth: 16}}
}

func blockParams(w *BlockWeights) map[string][]float32 {
	return map[string][]float32{"ln1w": w.Ln1W, "ln1b": w.Ln1B, "inw": w.InProjW, "inb": w.InProjB,
		"outw": w.OutProjW, "outb": w.OutProjB, "ln2w": w.Ln2W, "ln2b": w.Ln2B,
		"fcw": w.FcW, "fcb": w.FcB, "projw": w.ProjW, "projb": w.ProjB}
}

// randomizeLN gives LayerNorms non-trivial weights so their gradients are tested.
func randomizeLN(rng *rand.Rand, w *Weights) {
	// Embeddings start tiny (std 0.01–0.02); scale them up so a finite
	// difference step of 1e-2 stays in the linear regime.
	for _, x := range [][]float32{w.Text.TokenEmb, w.Text.PosEmb} {
		for j := range x {
			x[j] *= 50
		}
	}
	for _, bs := range [][]BlockWeights{w.Vision.Blocks, w.Text.Blocks} {
		for i := range bs {
			for _, x := range [][]float32{bs[i].Ln1W, bs[i].Ln2W, bs[i].Ln1B, bs[i].Ln2B, bs[i].InProjB, bs[i].FcB} {
				for j := range x {
					x[j] += (rng.Float32() - 0.5) * 0.5
				}
			}
		}
	}
}

func TestBlockBackward(t *testing.T) {
	for _, tc := range []struct {
		name   string
		causal bool
		pool   []int
	}{{"vision-full", false, nil}, {"text-full", true, nil}, {"vision-pruned", false, []int{0, 0}}, {"text-pruned", true, []int{4, 2}}} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 1))
			c := tinyConfig()
			w := Random(c, 3)
			randomizeLN(rng, w)
			g := Zero(c)
			D, T, B := 8, 5, 2
			blk := &Block{W: &w.Vision.Blocks[0], G: &g.Vision.Blocks[0], D: D, H: 2, MLP: 16, Causal: tc.causal}
			ad := &linAdapter{A: gradcheck.Rand(rng, D*D, 0.5), GA: make([]float32, D*D), D: D}
			blk.Adapter = ad
			x := gradcheck.Rand(rng, B*T*D, 1)
			rows := B * T
			if tc.pool != nil {
				rows = B
			}
			r := gradcheck.Rand(rng, rows*D, 1)
			out := make([]float32, rows*D)
			var sc BlockScratch
			loss := func() float64 { blk.Forward(out, x, B, T, tc.pool, true, &sc); return gradcheck.Dot(out, r) }
			loss()
			dx := make([]float32, len(x))
			blk.Backward(dx, r, &sc)
			if err := gradcheck.Check("dx", x, dx, loss, 1e-2, 2e-2, 40, rng); err != nil {
				t.Fatal(err)
			}
			if err := gradcheck.Check("adapter", ad.A, ad.GA, loss, 1e-2, 2e-2, 40, rng); err != nil {
				t.Fatal(err)
			}
			gp := blockParams(blk.G)
			for name, p := range blockParams(blk.W) {
				if err := gradcheck.Check(name, p, gp[name], loss, 1e-2, 2e-2, 30, rng); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestPrunedBlockEqualsFull checks the exact last-block pruning: the pooled
// rows of the full block equal the pruned block's output, forward and
// backward (input gradients for a loss on the pooled rows only).
func TestPrunedBlockEqualsFull(t *testing.T) {
	for _, causal := range []bool{false, true} {
		t.Run(fmt.Sprintf("causal=%v", causal), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(8, 1))
			c := tinyConfig()
			w := Random(c, 4)
			randomizeLN(rng, w)
			D, T, B := 8, 6, 3
			pool := []int{0, 5, 2}
			ad := &linAdapter{A: gradcheck.Rand(rng, D*D, 0.5), GA: make([]float32, D*D), D: D}
			blk := &Block{W: &w.Text.Blocks[1], D: D, H: 2, MLP: 16, Causal: causal, Adapter: ad}
			x := gradcheck.Rand(rng, B*T*D, 1)
			var sc BlockScratch
			full := make([]float32, B*T*D)
			blk.Forward(full, x, B, T, nil, true, &sc)
			r := gradcheck.Rand(rng, B*D, 1)
			dfull := make([]float32, B*T*D)
			for b, p := range pool {
				copy(dfull[(b*T+p)*D:(b*T+p)*D+D], r[b*D:b*D+D])
			}
			dxFull := make([]float32, len(x))
			blk.Backward(dxFull, dfull, &sc)
			gaFull := append([]float32(nil), ad.GA...)
			clear(ad.GA)

			pruned := make([]float32, B*D)
			blk.Forward(pruned, x, B, T, pool, true, &sc)
			var want []float32
			for b, p := range pool {
				want = append(want, full[(b*T+p)*D:(b*T+p)*D+D]...)
			}
			closeElementwise(t, "pruned output", pruned, want, 1e-5)
			dxPruned := make([]float32, len(x))
			blk.Backward(dxPruned, r, &sc)
			closeElementwise(t, "pruned dx", dxPruned, dxFull, 1e-5)
			closeElementwise(t, "pruned adapter grad", ad.GA, gaFull, 1e-5)
		})
	}
}

// TestEncodersBackward checks the whole image and text encoders, embedding
// and head included, against finite differences.
func TestEncodersBackward(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 1))
	c := tinyConfig()
	w := Random(c, 5)
	randomizeLN(rng, w)
	m := New(w)
	g := m.EnableGrads()
	B := 2
	E := c.EmbedDim
	pixels := gradcheck.Rand(rng, B*3*8*8, 1)
	r := gradcheck.Rand(rng, B*E, 1)
	feat := make([]float32, B*E)
	nb := len(m.Vision.Stack.Blocks)
	vloss := func() float64 {
		x0 := m.Vision.EmbedForward(pixels, B)
		pooled := m.Vision.Stack.Forward(x0, B, c.Vision.Tokens(), 0, nb, ClassPool(B), true)
		m.Vision.HeadForward(feat, pooled, B)
		return gradcheck.Dot(feat, r)
	}
	vloss()
	dpool := m.Vision.HeadBackward(r)
	dx0 := make([]float32, B*c.Vision.Tokens()*8)
	m.Vision.Stack.Backward(dx0, dpool)
	m.Vision.EmbedBackward(dx0)
	for name, pair := range map[string][2][]float32{
		"conv1": {w.Vision.Conv1W, g.Vision.Conv1W}, "class": {w.Vision.ClassEmb, g.Vision.ClassEmb},
		"pos": {w.Vision.PosEmb, g.Vision.PosEmb}, "ln_pre": {w.Vision.LnPreW, g.Vision.LnPreW},
		"ln_post": {w.Vision.LnPostB, g.Vision.LnPostB}, "proj": {w.Vision.Proj, g.Vision.Proj},
		"block0.fc": {w.Vision.Blocks[0].FcW, g.Vision.Blocks[0].FcW},
	} {
		if err := gradcheck.Check("vision."+name, pair[0], pair[1], vloss, 1e-2, 2e-2, 30, rng); err != nil {
			t.Fatal(err)
		}
	}

	tokens := []int{18, 3, 4, 19, 0, 0, 18, 5, 19, 0, 0, 0}
	C := c.Text.ContextLength
	e := make([]float32, B*C*8)
	tloss := func() float64 {
		if err := m.Text.TokenEmbed(e, tokens, B); err != nil {
			t.Fatal(err)
		}
		x0 := m.Text.EmbedForward(e, B)
		pooled := m.Text.Stack.Forward(x0, B, C, 0, nb, EOTPositions(tokens, B, C), true)
		m.Text.HeadForward(feat, pooled, B)
		return gradcheck.Dot(feat, r)
	}
	tloss()
	dpool = m.Text.HeadBackward(r)
	dx0 = make([]float32, B*C*8)
	m.Text.Stack.Backward(dx0, dpool)
	de := m.Text.EmbedBackward(dx0)
	m.Text.TokenEmbedBackward(de, tokens, B)
	for name, pair := range map[string][2][]float32{
		"token": {w.Text.TokenEmb, g.Text.TokenEmb}, "pos": {w.Text.PosEmb, g.Text.PosEmb},
		"ln_final": {w.Text.LnFinalW, g.Text.LnFinalW}, "proj": {w.Text.Proj, g.Text.Proj},
		"block1.in": {w.Text.Blocks[1].InProjW, g.Text.Blocks[1].InProjW},
	} {
		if err := gradcheck.Check("text."+name, pair[0], pair[1], tloss, 1e-2, 2e-2, 30, rng); err != nil {
			t.Fatal(err)
		}
	}
	if got := EOTPositions(tokens, B, C); got[0] != 3 || got[1] != 2 {
		t.Fatalf("EOT positions %v, want [3 2]", got)
	}
}
