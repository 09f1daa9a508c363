package fedclip

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/assets"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/internal/methodtest"
	"github.com/pfedmma/pfedmma/internal/tensortest"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tensor"
)

// layerCheck compares the input gradient din of a layer with finite
// differences of L = Σ forward(x) ⊙ r.
func layerCheck(t *testing.T, name string, x []float32, forward func() []float32, din []float32, rng *rand.Rand) {
	t.Helper()
	r := gradcheck.Rand(rand.New(rand.NewPCG(7, 7)), len(forward()), 1)
	loss := func() float64 { return gradcheck.Dot(forward(), r) }
	if err := gradcheck.Check(name, x, din, loss, 1e-2, 1e-2, len(x), rng); err != nil {
		t.Error(err)
	}
}

// TestLayerGrads: each layer's backward against finite differences.
func TestLayerGrads(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const B, d = 3, 7
	r := gradcheck.Rand(rand.New(rand.NewPCG(7, 7)), B*d, 1)
	x := gradcheck.Rand(rng, B*d, 2)
	out := make([]float32, B*d)
	din := make([]float32, B*d)

	tanh := func() []float32 { TanhForward(out, x, B*d); return out }
	tanh()
	TanhBackward(din, r, out, B*d)
	layerCheck(t, "tanh", x, tanh, din, rng)

	softmax := func() []float32 { SoftmaxForward(out, x, B, d); return out }
	softmax()
	SoftmaxBackward(din, r, out, B, d)
	layerCheck(t, "softmax", x, softmax, din, rng)
	for b := 0; b < B; b++ { // rows sum to one
		var s float64
		for _, v := range out[b*d : (b+1)*d] {
			s += float64(v)
		}
		if math.Abs(s-1) > 1e-6 {
			t.Errorf("softmax row %d sums to %v", b, s)
		}
	}

	f := gradcheck.Rand(rng, B*d, 1)
	gate := func() []float32 { GateForward(out, x, f, B*d); return out }
	gate()
	GateBackward(din, r, f, B*d)
	layerCheck(t, "gate", x, gate, din, rng)
}

// TestAdapterGrad: the whole adapter's weight gradients, L = Σ g ⊙ r.
func TestAdapterGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const B, d = 4, 6
	p := Init(d, rng)
	for _, n := range []string{ParamW1, ParamW2} { // far from uniform attention
		for i := range p[n].Data {
			p[n].Data[i] *= 4
		}
	}
	f := gradcheck.Rand(rng, B*d, 1)
	r := gradcheck.Rand(rng, B*d, 1)
	var ad Adapter
	g := make([]float32, B*d)
	loss := func() float64 { ad.Forward(g, f, weights(p), B, d); return gradcheck.Dot(g, r) }
	loss()
	grads := tensor.Named{}
	for name, shape := range Shapes(d) {
		grads[name] = tensor.New(shape...)
	}
	ad.Backward(weights(grads), r, f, weights(p))
	for _, n := range Names {
		if err := gradcheck.Check(n, p[n].Data, grads[n].Data, loss, 1e-2, 2e-2, len(p[n].Data), rng); err != nil {
			t.Error(err)
		}
	}
}

// TestCosine: the head's logits are clip.Logits' (exp(logit_scale)·cos)
// and its gradient to g is the finite difference of Σ L ⊙ r.
func TestCosine(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 1))
	const B, N, d = 4, 3, 10
	g, txt := gradcheck.Rand(rng, B*d, 1), gradcheck.Rand(rng, N*d, 1)
	scale := float32(math.Log(7))
	var c Cosine
	got := append([]float32(nil), c.Forward(g, txt, B, N, d, scale)...)
	fixtureClose(t, "cosine logits", got, clip.Logits(g, txt, B, N, d, scale), 1e-6)
	r := gradcheck.Rand(rng, B*N, 1)
	dg := make([]float32, B*d)
	c.Backward(dg, r)
	loss := func() float64 { return gradcheck.Dot(c.Forward(g, txt, B, N, d, scale), r) }
	if err := gradcheck.Check("g", g, dg, loss, 1e-2, 1e-2, B*d, rng); err != nil {
		t.Error(err)
	}
}

// TestContrastiveLossGrad: the loss's gradient with respect to g, with a
// repeated label (equal text rows), and its value against a float64
// restatement of (CE(L) + CE(Lᵀ))/2.
func TestContrastiveLossGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const B, d = 5, 8
	g := gradcheck.Rand(rng, B*d, 1)
	txt := gradcheck.Rand(rng, B*d, 1)
	copy(txt[4*d:], txt[1*d:2*d]) // images 1 and 4 share a class
	scale := float32(math.Log(10))
	var c ContrastiveLoss
	loss := func() float64 { _, l := c.Forward(g, txt, B, d, scale); return l }
	loss()
	dg := make([]float32, B*d)
	c.Backward(dg)
	if err := gradcheck.Check("g", g, dg, loss, 1e-2, 1e-2, B*d, rng); err != nil {
		t.Error(err)
	}
	// float64 restatement (at g itself: the check left the loss at a perturbed g)
	l := loss()
	gn, tn := norm64(g, B, d), norm64(txt, B, d)
	L := make([]float64, B*B)
	for i := 0; i < B; i++ {
		for j := 0; j < B; j++ {
			for k := 0; k < d; k++ {
				L[i*B+j] += 10 * gn[i*d+k] * tn[j*d+k]
			}
		}
	}
	var li, lt float64
	for i := 0; i < B; i++ {
		var zi, zt float64
		for j := 0; j < B; j++ {
			zi += math.Exp(L[i*B+j])
			zt += math.Exp(L[j*B+i])
		}
		li += math.Log(zi) - L[i*B+i]
		lt += math.Log(zt) - L[i*B+i]
	}
	want := (li + lt) / (2 * B)
	if math.Abs(l-want) > 1e-5*(1+want) {
		t.Errorf("loss %v, want %v", l, want)
	}
	if math.Abs(c.LossImg-li/B) > 1e-5*(1+li) || math.Abs(c.LossTxt-lt/B) > 1e-5*(1+lt) {
		t.Errorf("terms %v %v, want %v %v", c.LossImg, c.LossTxt, li/B, lt/B)
	}
}

func norm64(x []float32, n, d int) []float64 {
	out := make([]float64, n*d)
	for i := 0; i < n; i++ {
		var s float64
		for _, v := range x[i*d : (i+1)*d] {
			s += float64(v) * float64(v)
		}
		for k := 0; k < d; k++ {
			out[i*d+k] = float64(x[i*d+k]) / math.Sqrt(s)
		}
	}
	return out
}

// TestStepGrad: the whole step (adapter, contrastive loss) against finite
// differences.
func TestStepGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	const B, C, d = 6, 4, 12
	p := Init(d, rng)
	for _, n := range []string{ParamW1, ParamW2} {
		for i := range p[n].Data {
			p[n].Data[i] *= 4
		}
	}
	m := newModel(d, float32(math.Log(20)))
	f, txt := gradcheck.Rand(rng, B*d, 1), gradcheck.Rand(rng, C*d, 1)
	labels := []int{0, 1, 2, 3, 1, 0}
	loss := func() float64 { l, _ := m.Step(p, f, labels, txt); return l }
	loss()
	grads := m.Grads.Clone()
	for _, n := range Names {
		if err := gradcheck.Check(n, p[n].Data, grads[n].Data, loss, 1e-2, 2e-2, 48, rng); err != nil {
			t.Error(err)
		}
	}
}

// build makes the method on methodtest.FeatureEnv (no domain shifts)
// whose text features, the perturbed class means, are
// installed in the frozen scorer's place.
func build(t testing.TB, s *Settings, d, K, clients, n int, opts train.Options) *methods.Plan {
	env, txt := methodtest.FeatureEnv(t, d, K, clients, n, opts, false)
	plan, err := Method{}.Build(env, s)
	if err != nil {
		t.Fatal(err)
	}
	model(plan.Clients[0]).text = map[int][]float32{0: txt}
	return plan
}

// TestResumeBitIdentical: 2 rounds, a checkpoint, fresh clients and
// strategy, 1 more round equals 3 straight rounds bit for bit; the global
// adapter too, and training moved it.
func TestResumeBitIdentical(t *testing.T) {
	s := &Settings{LR: 0.2}
	mk := func() *methods.Plan { return build(t, s, 16, 5, 4, 24, methodtest.FeatureOptions()) }
	ref, resumed := methodtest.ResumeCoordinator(t, mk)
	if d := tensortest.BitsDiff(resumed.Global(), ref.Global()); d != "" || tensortest.BitsDiff(ref.Global(), mk().Global()) == "" {
		t.Errorf("global adapter differs after resuming (%q), or training did not move it", d)
	}
}

// TestGlobalModel: every client uploads the whole adapter, and after a
// round every client scores the same (global) adapter: on a shared
// evaluation set all clients report the same accuracy; the global scorer
// uses the averaged adapter.
func TestGlobalModel(t *testing.T) {
	plan := build(t, &Settings{}, 16, 5, 3, 24, methodtest.FeatureOptions())
	var tasks []*protocol.ClientTask
	for _, c := range plan.Clients {
		tasks = append(tasks, c.(*client.Client).Task)
	}
	methodtest.GlobalModel(t, plan, tasks, int64(3*(2*16*16+2*16)*4))
	sc, err := plan.GlobalScorer()
	if err != nil {
		t.Fatal(err)
	}
	// its logits are the averaged adapter's
	const B = 3
	f := gradcheck.Rand(rand.New(rand.NewPCG(7, 8)), B*16, 1)
	got, err := sc.Logits(0, f, B)
	if err != nil {
		t.Fatal(err)
	}
	got = slices.Clone(got)
	m := model(plan.Clients[0])
	if d := tensortest.BitsDiff(tensor.Named{"logits": {Data: got}}, tensor.Named{"logits": {Data: m.Logits(plan.Global(), f, B, m.text[0])}}); d != "" {
		t.Errorf("the global scorer does not use the averaged adapter (%s)", d)
	}
}

// TestTrainingLearns: on synthetic features of 20 classes the adapter's
// contrastive training lowers the loss and raises the global model's
// accuracy above the untrained adapter's (logits ×100: lr 0.01).
func TestTrainingLearns(t *testing.T) {
	opts := methodtest.FeatureOptions()
	opts.Epochs = 3
	plan := build(t, &Settings{LR: 0.01}, 16, 20, 3, 48, opts)
	before, err := plan.Clients[0].Evaluate(context.Background(), federation.EvaluateIns{})
	if err != nil {
		t.Fatal(err)
	}
	co := methodtest.Coordinator(plan, t.TempDir(), 4)
	co.Fraction = 1
	hist, err := co.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	after := hist.Rounds[len(hist.Rounds)-1].Eval[0]["acc"]
	if !(after > before.Metrics["acc"]) {
		t.Errorf("accuracy %v after 4 rounds, %v before", after, before.Metrics["acc"])
	}
	if l0, l3 := hist.Rounds[0].Fit[0]["loss"], hist.Rounds[3].Fit[0]["loss"]; !(l3 < l0) {
		t.Errorf("training loss %v in round 3, %v in round 0", l3, l0)
	}
}

// TestEvaluateReceivesGlobal (issue 17, defect 2): a client scores the
// adapter its evaluation instruction carries and nothing else
// (methodtest.EvaluateReceivesGlobal); a restarted site holds the adapter
// it scored.
func TestEvaluateReceivesGlobal(t *testing.T) {
	plan := build(t, &Settings{}, 16, 5, 2, 24, methodtest.FeatureOptions())
	c := plan.Clients[0].(*client.Client)
	methodtest.EvaluateReceivesGlobal(t, plan, c.P)
	st, err := c.State()
	if err != nil {
		t.Fatal(err)
	}
	fresh := build(t, &Settings{}, 16, 5, 2, 24, methodtest.FeatureOptions()).Clients[0].(*client.Client)
	if err := fresh.LoadState(st); err != nil {
		t.Fatal(err)
	}
	if d := tensortest.BitsDiff(fresh.P, plan.Global()); d != "" {
		t.Fatalf("a restarted site does not hold the adapter it scored (%s)", d)
	}
}

// TestPredictorMatchesEvaluation: `pfedmma predict` with a trained site's
// saved adapter scores pixels as the site's evaluation scores their cached
// features, on the embedded model and tokenizer with the run's template.
func TestPredictorMatchesEvaluation(t *testing.T) {
	w, tok, err := assets.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	m := clip.New(w)
	pe := methods.PredictEnv{Model: m, Tok: tok, Template: "a photo of a {}."}
	classes := []string{"red_circle", "blue square", "green triangle"}
	tokens, err := pe.Tokens(classes)
	if err != nil {
		t.Fatal(err)
	}
	S := m.W.Config.Vision.ImageSize
	const B = 6
	rng := rand.New(rand.NewPCG(1, 3))
	px := gradcheck.Rand(rng, B*3*S*S, 1)
	labels := []int{0, 1, 2, 0, 1, 2}
	opts := train.Options{Epochs: 2, Batch: 3, Optimizer: "sgd", LR: 0.5, Momentum: 0.9, InOrder: true}
	env, err := parity.TensorEnv(m, methods.Features, tokens, len(classes), []parity.TensorClient{{Pixels: px, Labels: labels}}, opts, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer env.TrainStore.Close()
	plan, err := Method{}.Build(env, &Settings{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := methodtest.Coordinator(plan, t.TempDir(), 1).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	saved, err := plan.Site(0)
	if err != nil {
		t.Fatal(err)
	}
	if tensortest.BitsDiff(saved, Init(m.W.Config.EmbedDim, rand.New(rand.NewPCG(5, 0xfedc11)))) == "" {
		t.Fatal("the site's adapter did not train")
	}
	c := plan.Clients[0].(*client.Client)
	recs := make([]float32, B*env.Prefixer.RecordLen())
	for k := 0; k < B; k++ {
		if err := env.TrainStore.GetBatch([]int{env.TrainRecs[c.Task.Train[k]][0]}, recs[k*env.Prefixer.RecordLen():(k+1)*env.Prefixer.RecordLen()]); err != nil {
			t.Fatal(err)
		}
	}
	sc, err := c.Scorer()
	if err != nil {
		t.Fatal(err)
	}
	want, err := sc.Logits(0, recs, B)
	if err != nil {
		t.Fatal(err)
	}
	want = append([]float32(nil), want...)
	pr, err := Method{}.Predictor(pe, &Settings{}, saved)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pr.Logits(px, B, classes)
	if err != nil {
		t.Fatal(err)
	}
	fixtureClose(t, "predict logits", got, want, 1e-5)
	delete(saved, ParamB1)
	if _, err := (Method{}).Predictor(pe, &Settings{}, saved); err == nil {
		t.Error("a saved site without img_adap.0.bias accepted")
	}
}

func fixtureClose(t *testing.T, name string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); d > tol*(1+math.Abs(float64(want[i]))) {
			t.Fatalf("%s[%d] = %v, want %v", name, i, got[i], want[i])
		}
	}
}

// TestSettings: the config section rejects a negative lr, naming it, and
// the default has no lr of its own (the run's).
func TestSettings(t *testing.T) {
	e := config.Default()
	if s, ok := e.Section("fedclip").(*Settings); !ok || s.LR != 0 {
		t.Fatalf("default fedclip section %#v", e.Section("fedclip"))
	}
	if err := e.Set("fedclip.lr", "-1"); err != nil {
		t.Fatal(err)
	}
	if err := e.Validate(); err == nil || !strings.Contains(err.Error(), "fedclip.lr") {
		t.Errorf("fedclip.lr=-1: %v, want an error naming fedclip.lr", err)
	}
	if err := e.Set("fedclip.rate", "1"); err == nil || !strings.Contains(err.Error(), "rate") {
		t.Errorf("unknown key fedclip.rate: %v", err)
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
