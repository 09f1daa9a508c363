package cliplora

import (
	"context"
	"maps"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/tensor"
)

func tinyModel(seed uint64) *clip.Model {
	cfg := clip.Config{EmbedDim: 8,
		Vision: clip.VisionConfig{ImageSize: 8, PatchSize: 4, Width: 8, Layers: 2, Heads: 2, MLPWidth: 16},
		Text:   clip.TextConfig{ContextLength: 8, VocabSize: 30, Width: 8, Layers: 2, Heads: 2, MLPWidth: 16}}
	return clip.New(clip.Random(cfg, seed))
}

func rows(C int) []int {
	out := make([]int, C*8)
	for c := 0; c < C; c++ {
		copy(out[c*8:], []int{28, 3 + c, 10 + c, 29})
	}
	return out
}

// TestGradients checks the LoRA factors' gradients through both whole
// encoders (every block, the pruned last image block, the truncated text)
// against central finite differences of the cosine cross-entropy. The loss
// runs through four float32 blocks and the softmax of normalised features,
// so its finite differences carry about 1–3% rounding and curvature error
// (measured over eps 3e-3…3e-2 and OpenBLAS kernel families): the
// tolerance is 5% here, and TestBlockGradients checks each block's LoRA
// path at 2% with a linear loss.
func TestGradients(t *testing.T) {
	m := tinyModel(3)
	// A logit multiplier of e² instead of 1/0.07 keeps the float32 loss's
	// rounding noise well below the finite-difference signal on every GEMM
	// kernel family (Haswell's summation order showed 4% noise at 1/0.07).
	m.W.LogitScale = 2
	s := &Settings{Rank: 2, Alpha: 1, Dropout: 0, Scale: "sqrt"}
	r := rand.New(rand.NewPCG(5, 6))
	l := New(m, s, r)
	for _, name := range slices.Sorted(maps.Keys(l.Params)) { // B starts at zero: move it so every path carries gradient
		p := l.Params[name]
		for i := range p.Data {
			p.Data[i] += float32(r.NormFloat64() * 0.3)
		}
	}
	B, C, E := 3, 3, 8
	px := make([]float32, B*3*8*8)
	for i := range px {
		px[i] = float32(r.NormFloat64())
	}
	prefix := clip.ImagePrefix(m, 1, px, B, nil)
	tokens := rows(C)
	tp, err := clip.TextPrefix(m, 1, tokens, C)
	if err != nil {
		t.Fatal(err)
	}
	eot := clip.EOTPositions(tokens, C, 8)
	labels := []int{0, 2, 1}
	loss := func(train bool) float64 {
		l.Attach(m, r)
		img, txt := Features(m, prefix, B, tp, eot, train, nil, nil)
		var head clip.CosineLogits
		logits := append([]float32(nil), head.Forward(img, txt, B, C, E, m.W.LogitScale)...)
		dl := make([]float32, B*C)
		v := clip.CrossEntropy(logits, labels, B, C, dl)
		if train {
			dImg, dTxt := make([]float32, B*E), make([]float32, C*E)
			head.Backward(dl, dImg, dTxt)
			Backward(m, dImg, dTxt)
		}
		return v
	}
	l.ZeroGrads()
	loss(true)
	grads := l.Grads.Clone()
	for _, name := range []string{Name("visual", 0, "q", "A"), Name("visual", 1, "v", "B"), Name("visual", 1, "q", "B"),
		Name("text", 0, "k", "A"), Name("text", 1, "q", "B"), Name("text", 1, "v", "A")} {
		if err := gradcheck.Check(name, l.Params[name].Data, grads[name].Data, func() float64 { return loss(false) }, 1e-2, 5e-2, 12, r); err != nil {
			t.Error(err)
		}
	}
}

// TestBlockGradients checks one block with LoRA on q, k and v — full and
// pruned, causal and not, with and without dropout, with and without
// aggregate: product's frozen delta — against central
// finite differences of L = Σ out ⊙ r: the A and B gradients and the
// block's input gradient (which LoRA's dh adds to).
func TestBlockGradients(t *testing.T) {
	for _, tc := range []struct {
		name    string
		causal  bool
		pool    []int
		dropout float64
		delta   bool
	}{{"vision-full", false, nil, 0, false}, {"text-full", true, nil, 0, false}, {"vision-pruned", false, []int{0, 0}, 0, false},
		{"text-pruned", true, []int{4, 2}, 0, false}, {"vision-dropout", false, nil, 0.25, false},
		{"text-pruned-dropout", true, []int{3, 1}, 0.25, false},
		{"vision-delta-dropout", false, nil, 0.25, true}, {"text-pruned-delta", true, []int{4, 1}, 0, true}} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 1))
			m := tinyModel(3)
			D, T, B, R := 8, 5, 2, 2
			blk := m.Vision.Stack.Blocks[0]
			blk.Causal = tc.causal
			lb := &blockLoRA{D: D, R: R, scale: 0.7, dropout: tc.dropout}
			for k := range Parts {
				lb.A[k], lb.B[k] = gradcheck.Rand(rng, R*D, 0.5), gradcheck.Rand(rng, D*R, 0.5)
				lb.dA[k], lb.dB[k] = make([]float32, R*D), make([]float32, D*R)
				if tc.delta { // aggregate: product's frozen change
					lb.delta[k] = gradcheck.Rand(rng, D*D, 0.3)
				}
			}
			blk.QKV = lb
			defer func() { blk.QKV = nil }()
			x := gradcheck.Rand(rng, B*T*D, 1)
			rows := B * T
			if tc.pool != nil {
				rows = B
			}
			r := gradcheck.Rand(rng, rows*D, 1)
			out := make([]float32, rows*D)
			var sc clip.BlockScratch
			loss := func() float64 {
				lb.rng = rand.New(rand.NewPCG(3, 3)) // the same dropout masks every call
				blk.Forward(out, x, B, T, tc.pool, true, &sc)
				return gradcheck.Dot(out, r)
			}
			loss()
			dx := make([]float32, len(x))
			blk.Backward(dx, r, &sc)
			if err := gradcheck.Check("dx", x, dx, loss, 1e-2, 2e-2, 40, rng); err != nil {
				t.Error(err)
			}
			for k, part := range Parts {
				if err := gradcheck.Check(part+".A", lb.A[k], lb.dA[k], loss, 1e-2, 2e-2, 16, rng); err != nil {
					t.Error(err)
				}
				if err := gradcheck.Check(part+".B", lb.B[k], lb.dB[k], loss, 1e-2, 2e-2, 16, rng); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// TestResumeBitIdentical: two rounds, a restart with fresh clients, one more
// round equals three straight rounds (dropout draws included).
func TestResumeBitIdentical(t *testing.T) {
	for _, agg := range []string{AggregateAB, AggregateProduct} {
		t.Run(agg, func(t *testing.T) { testResume(t, agg) })
	}
}

func testResume(t *testing.T, agg string) {
	run := func(dir string, rounds int, resume bool) tensor.Named {
		m := tinyModel(4)
		r := rand.New(rand.NewPCG(1, 2))
		px := make([]float32, 4*3*8*8)
		for i := range px {
			px[i] = float32(r.NormFloat64())
		}
		tc := parity.TensorClient{Pixels: px, Labels: []int{0, 1, 2, 1}}
		env, err := parity.TensorEnv(m, 1, rows(3), 3, []parity.TensorClient{tc, tc}, train.Options{Epochs: 1, Batch: 2, LR: 0.1, Momentum: 0.9}, 9)
		if err != nil {
			t.Fatal(err)
		}
		sec := Method{}.DefaultConfig().(*Settings)
		sec.Aggregate = agg
		plan, err := Method{}.Build(env, sec)
		if err != nil {
			t.Fatal(err)
		}
		var proxies []federation.ClientProxy
		for i, c := range plan.Clients {
			proxies = append(proxies, federation.NewSite(c, filepath.Join(dir, "site", string(rune('a'+i)))))
		}
		coord := &federation.Coordinator{Strategy: plan.Strategy, Proxies: proxies, Rounds: rounds, Fraction: 1, Seed: 1,
			EvalEvery: 100, Store: federation.FileStore{Path: filepath.Join(dir, "ck")}}
		if resume {
			_, err = coord.Resume(context.Background())
		} else {
			_, err = coord.Run(context.Background())
		}
		if err != nil {
			t.Fatal(err)
		}
		return plan.Global()
	}
	straight := run(t.TempDir(), 3, false)
	dir := t.TempDir()
	run(dir, 2, false)
	resumed := run(dir, 3, true)
	for name, a := range straight {
		b := resumed[name]
		for i := range a.Data {
			if a.Data[i] != b.Data[i] {
				t.Fatalf("%s differs after resuming", name)
			}
		}
	}
}

// TestProductAggregation: under aggregate: product the server's tensors
// are the FedAvg (weights n_i) of every client's Δ + s·B·A — not
// s·avg(B)·avg(A) — and a client that installs them holds exactly the
// averaged model: its own Δ + s·B·A equals the average bit for bit.
func TestProductAggregation(t *testing.T) {
	m := tinyModel(4)
	r := rand.New(rand.NewPCG(1, 2))
	px := func(n int) []float32 {
		v := make([]float32, n*3*8*8)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	clients := []parity.TensorClient{{Pixels: px(4), Labels: []int{0, 1, 2, 1}}, {Pixels: px(2), Labels: []int{2, 0}}}
	env, err := parity.TensorEnv(m, 1, rows(3), 3, clients, train.Options{Epochs: 2, Batch: 2, LR: 0.5, Momentum: 0.9}, 9)
	if err != nil {
		t.Fatal(err)
	}
	defer env.TrainStore.Close()
	sec := Method{}.DefaultConfig().(*Settings)
	sec.Aggregate, sec.Dropout = AggregateProduct, 0
	plan, err := Method{}.Build(env, sec)
	if err != nil {
		t.Fatal(err)
	}
	coord := &federation.Coordinator{Strategy: plan.Strategy, Proxies: []federation.ClientProxy{
		federation.NewSite(plan.Clients[0], ""), federation.NewSite(plan.Clients[1], "")}, Rounds: 1, Fraction: 1, Seed: 1, EvalEvery: 100}
	if _, err := coord.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfg := m.W.Config
	var prods []tensor.Named
	avgA := tensor.Named{}
	w := []float32{4.0 / 6, 2.0 / 6}
	for i := range plan.Clients {
		site, err := plan.Site(i)
		if err != nil {
			t.Fatal(err)
		}
		p := tensor.Named{}
		for name, v := range site {
			if !IsDelta(name) {
				p[name] = v
				if avgA[name] == nil {
					avgA[name] = tensor.New(v.Shape...)
				}
				for k, x := range v.Data {
					avgA[name].Data[k] += w[i] * x
				}
			}
		}
		l := bind(p, cfg, sec).withDeltas(cfg) // Δ was zero in round 0
		prods = append(prods, l.Product(cfg))
	}
	global := plan.Global()
	differs := false
	naive := bind(avgA, cfg, sec).Product(cfg) // s·avg(B)·avg(A)
	for name, g := range global {
		for k := range g.Data {
			want := w[0]*prods[0][name].Data[k] + w[1]*prods[1][name].Data[k]
			if math.Abs(float64(g.Data[k]-want)) > 1e-5*(1+math.Abs(float64(want))) {
				t.Fatalf("global %s[%d] = %v, want the weighted mean %v", name, k, g.Data[k], want)
			}
			if math.Abs(float64(g.Data[k]-naive[name].Data[k])) > 1e-4 {
				differs = true
			}
		}
	}
	if !differs {
		t.Error("the averaged products equal the product of the averaged factors: the test cannot tell them apart")
	}
	c := plan.Clients[0].(*client.Client)
	if err := c.Site.(*site).Receive(global); err != nil {
		t.Fatal(err)
	}
	for name, v := range c.Site.(*site).lora.Product(cfg) {
		for k := range v.Data {
			if v.Data[k] != global[name].Data[k] {
				t.Fatalf("after installing, %s[%d] = %v, want the average %v", name, k, v.Data[k], global[name].Data[k])
			}
		}
	}
}
