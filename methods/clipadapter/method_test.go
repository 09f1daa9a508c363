package clipadapter

import (
	"context"
	"log/slog"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/internal/methodtest"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tensor"
)

// build makes the method on methodtest.FeatureEnv (with domain shifts)
// whose text features, the perturbed class means, are
// installed in the shared frozen scorer's place.
func build(t testing.TB, s *Settings, d, K, clients, n int, opts train.Options) *methods.Plan {
	env, txt := methodtest.FeatureEnv(t, d, K, clients, n, opts, true)
	plan, err := Method{}.Build(env, s)
	if err != nil {
		t.Fatal(err)
	}
	model(plan.Clients[0]).text = map[int][]float32{0: txt}
	return plan
}

// TestAdapterGrad: finite differences of L = Σ Forward(f) ⊙ g with respect
// to both matrices.
func TestAdapterGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const B, d, k = 5, 12, 3
	ad := Adapter{Alpha: 0.2}
	f := gradcheck.Rand(rng, B*d, 1)
	w1, w2 := gradcheck.Rand(rng, k*d, 0.5), gradcheck.Rand(rng, d*k, 0.5)
	g := gradcheck.Rand(rng, B*d, 1)
	out := make([]float32, B*d)
	loss := func() float64 {
		ad.Forward(out, f, w1, w2, B, d, k)
		return gradcheck.Dot(out, g)
	}
	loss()
	dw1, dw2 := make([]float32, k*d), make([]float32, d*k)
	ad.Backward(dw1, dw2, g, f, w2, d, k)
	if err := gradcheck.Check("w1", w1, dw1, loss, 1e-3, 1e-2, k*d, rng); err != nil {
		t.Error(err)
	}
	if err := gradcheck.Check("w2", w2, dw2, loss, 1e-3, 1e-2, d*k, rng); err != nil {
		t.Error(err)
	}
	// f' = α·A(f) + (1 − α)·f exactly.
	loss()
	for i := 0; i < B*d; i++ {
		want := 0.2*ad.a[i] + 0.8*f[i]
		if math.Abs(float64(out[i]-want)) > 1e-6 {
			t.Fatalf("f'[%d] = %g, want %g", i, out[i], want)
		}
	}
}

// TestStepGrad: the whole loss (adapter, cosine head, cross entropy).
func TestStepGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const B, C, d = 6, 4, 16
	s := &Settings{Ratio: 0.2, Reduction: 4}
	p := s.Init(d, rng)
	m := &Model{Adapter: Adapter{Alpha: 0.2}, D: d, K: d / 4, Scale: float32(math.Log(20)), Grads: tensor.Named{}}
	for name, tt := range p {
		m.Grads[name] = tensor.New(tt.Shape...)
	}
	f, txt := gradcheck.Rand(rng, B*d, 1), gradcheck.Rand(rng, C*d, 1)
	labels := []int{0, 1, 2, 3, 1, 0}
	loss := func() float64 { l, _ := m.Step(p, f, labels, txt); return l }
	loss()
	grads := m.Grads.Clone()
	for name, tt := range p {
		if err := gradcheck.Check(name, tt.Data, grads[name].Data, loss, 1e-2, 2e-2, 48, rng); err != nil {
			t.Error(err)
		}
	}
}

// TestResumeBitIdentical: 2 rounds, a checkpoint, fresh clients and
// strategy, 1 more round equals 3 straight rounds bit for bit.
func TestResumeBitIdentical(t *testing.T) {
	s := &Settings{Ratio: 0.2, Reduction: 4}
	methodtest.ResumeCoordinator(t, func() *methods.Plan { return build(t, s, 16, 5, 4, 24, methodtest.FeatureOptions()) })
}

// TestGlobalModel: every client uploads the whole adapter (both matrices),
// and after a round every client scores the same (global) adapter: on a
// shared evaluation set all clients report the same accuracy.
func TestGlobalModel(t *testing.T) {
	s := &Settings{Ratio: 0.2, Reduction: 4}
	plan := build(t, s, 16, 5, 3, 24, methodtest.FeatureOptions())
	methodtest.GlobalModel(t, plan, tasks(plan), int64(3*4*2*16*4))
}

// tasks are the tasks of plan's clients.
func tasks(plan *methods.Plan) []*protocol.ClientTask {
	var out []*protocol.ClientTask
	for _, c := range plan.Clients {
		out = append(out, c.(*client.Client).Task)
	}
	return out
}

// TestEvaluateReceivesGlobal (issue 17, defect 2): a client scores the
// adapter its evaluation instruction carries and nothing else
// (methodtest.EvaluateReceivesGlobal).
func TestEvaluateReceivesGlobal(t *testing.T) {
	s := &Settings{Ratio: 0.2, Reduction: 4}
	plan := build(t, s, 16, 5, 2, 24, methodtest.FeatureOptions())
	methodtest.EvaluateReceivesGlobal(t, plan, plan.Clients[0].(*client.Client).P)
}

// BenchmarkRoundViTB32 is one CLIP-Adapter round at ViT-B/32 shapes (d =
// 512, K = 65 classes) on cached features: 10 clients of 100 images, batch
// 32, one local epoch, then FedAvg and every client's evaluation.
func BenchmarkRoundViTB32(b *testing.B) {
	s := &Settings{Ratio: 0.2, Reduction: 4}
	opts := train.Options{Epochs: 1, Batch: 32, Optimizer: "sgd", LR: 1e-3, Momentum: 0.9, WD: 5e-4}
	plan := build(b, s, 512, 65, 10, 100, opts)
	proxies := make([]federation.ClientProxy, len(plan.Clients))
	for i, c := range plan.Clients {
		proxies[i] = federation.NewSite(c, "")
	}
	co := &federation.Coordinator{Strategy: plan.Strategy, Proxies: proxies, Rounds: 1, Fraction: 1, Seed: 1,
		EvalEvery: 1, Logger: slog.New(slog.DiscardHandler)}
	b.ResetTimer()
	for b.Loop() {
		if _, err := co.Run(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

// oracleLogits is CLIP-Adapter's scoring in float64, written from the
// paper's formula (not from Adapter/CosineLogits):
// f' = α·ReLU(ReLU(f W1ᵀ) W2ᵀ) + (1 − α)·f, logits = e^scale·cos(f', t_c).
func oracleLogits(p tensor.Named, alpha, scale float64, f []float32, B, d int, txt []float32) []float64 {
	w1, w2 := p[ParamW1].Data, p[ParamW2].Data
	k := p[ParamW1].Shape[0]
	C := len(txt) / d
	out := make([]float64, B*C)
	for b := 0; b < B; b++ {
		z := make([]float64, k)
		for j := range z {
			for i := 0; i < d; i++ {
				z[j] += float64(f[b*d+i]) * float64(w1[j*d+i])
			}
			z[j] = math.Max(z[j], 0)
		}
		fp := make([]float64, d)
		var nf float64
		for i := range fp {
			var a float64
			for j := range z {
				a += z[j] * float64(w2[i*k+j])
			}
			fp[i] = alpha*math.Max(a, 0) + (1-alpha)*float64(f[b*d+i])
			nf += fp[i] * fp[i]
		}
		for c := 0; c < C; c++ {
			var dot, nt float64
			for i := range fp {
				dot += fp[i] * float64(txt[c*d+i])
				nt += float64(txt[c*d+i]) * float64(txt[c*d+i])
			}
			out[b*C+c] = math.Exp(scale) * dot / math.Sqrt(nf*nt)
		}
	}
	return out
}

// TestInitDistribution: Init draws nn.Linear's default, U(−1/√in, 1/√in),
// W1 then W2, row-major, each entry (2u − 1)/√in from the generator's
// successive uniforms u (an independent replay of the same generator).
func TestInitDistribution(t *testing.T) {
	const d = 16
	s := &Settings{Ratio: 0.2, Reduction: 4}
	p := s.Init(d, rand.New(rand.NewPCG(9, 10)))
	u := rand.New(rand.NewPCG(9, 10))
	for _, tc := range []struct {
		name string
		in   int
	}{{ParamW1, d}, {ParamW2, d / 4}} {
		bound := 1 / math.Sqrt(float64(tc.in))
		for i, v := range p[tc.name].Data {
			want := float32((2*u.Float64() - 1) * bound)
			if v != want || math.Abs(float64(v)) > bound {
				t.Fatalf("%s[%d] = %g, want %g (bound %g)", tc.name, i, v, want, bound)
			}
		}
	}
}

// TestScorerLogits: the global scorer (the init before any round) and a
// client's scorer give the float64 oracle's logits, and Model.Step's
// correct count is the oracle's argmax hits.
func TestScorerLogits(t *testing.T) {
	const d, K, B = 16, 5, 11 // B odd: the count differs from B − count
	s := &Settings{Ratio: 0.2, Reduction: 4}
	plan := build(t, s, d, K, 2, 24, methodtest.FeatureOptions())
	c := plan.Clients[0].(*client.Client)
	txt := model(c).text[0]
	rng := rand.New(rand.NewPCG(5, 6))
	f := gradcheck.Rand(rng, B*d, 1)
	// features near the class texts, so that some but not all are right
	labels := make([]int, B)
	for b := range labels {
		labels[b] = (b * 3) % K
		for i := 0; i < d; i++ {
			f[b*d+i] += 0.3 * txt[((b+b/4)%K)*d+i]
		}
	}
	scale := math.Log(100)
	want := oracleLogits(c.P, 0.2, scale, f, B, d, txt)
	check := func(what string, got []float32) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d logits, want %d", what, len(got), len(want))
		}
		for i := range want {
			if math.Abs(float64(got[i])-want[i]) > 1e-4*(1+math.Abs(want[i])) {
				t.Fatalf("%s: logit %d = %g, oracle %g", what, i, got[i], want[i])
			}
		}
	}
	g, err := plan.GlobalScorer()
	if err != nil {
		t.Fatal(err)
	}
	got, err := g.Logits(0, f, B)
	if err != nil {
		t.Fatal(err)
	}
	check("global scorer", got)
	cs, err := c.Scorer()
	if err != nil {
		t.Fatal(err)
	}
	if got, err = cs.Logits(0, f, B); err != nil {
		t.Fatal(err)
	}
	check("client scorer", got)
	hits := 0
	for b, y := range labels {
		best := 0
		for k := 1; k < K; k++ {
			if want[b*K+k] > want[b*K+best] {
				best = k
			}
		}
		if best == y {
			hits++
		}
	}
	if hits == 0 || hits == B || 2*hits == B {
		t.Fatalf("oracle hits %d of %d: the case does not test the count (0, all or half)", hits, B)
	}
	m := model(c)
	m.Grads = tensor.Named{ParamW1: tensor.New(d/4, d), ParamW2: tensor.New(d, d/4)}
	if _, correct := m.Step(c.P, f, labels, txt); correct != hits {
		t.Errorf("Step counts %d correct, oracle %d", correct, hits)
	}
}

// model is the Model a client's learners share.
func model(fc federation.Client) *Model {
	l, err := fc.(*client.Client).Learner()
	if err != nil {
		panic(err)
	}
	return l.(*learner).m
}
