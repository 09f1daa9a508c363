package kgcoop

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/assets"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/fixture"
	"github.com/pfedmma/pfedmma/methods/fixturetest"
	"github.com/pfedmma/pfedmma/methods/promptfed"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tensor"
)

// tensorPlan builds KgCoOp on the tiny CLIP over three in-memory clients
// (the fixture's class prompts).
func tensorPlan(t *testing.T) *methods.Plan {
	t.Helper()
	m := fixturetest.Model(t)
	ref, _ := read(t, dir+"step.safetensors")
	tokens, err := prompt.Ints(ref, "tokens")
	if err != nil {
		t.Fatal(err)
	}
	C := len(tokens) / m.W.Config.Text.ContextLength
	rng := rand.New(rand.NewPCG(8, 1))
	var clients []fixture.TensorClient
	for range 3 {
		const N = 5
		S := m.W.Config.Vision.ImageSize
		tc := fixture.TensorClient{Pixels: gradcheck.Rand(rng, N*3*S*S, 1)}
		for k := 0; k < N; k++ {
			tc.Labels = append(tc.Labels, rng.IntN(C))
		}
		clients = append(clients, tc)
	}
	opts := train.Options{Epochs: 1, Batch: 2, Optimizer: "sgd", LR: 0.05, Momentum: 0.9, WD: 5e-4}
	env, err := fixture.TensorEnv(m, methods.Features, tokens, C, clients, opts, 5)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.TrainStore.Close() })
	plan, err := Method{}.Build(env, &Settings{NCtx: 4, W: 8, InitStd: 0.02})
	if err != nil {
		t.Fatal(err)
	}
	var infos []federation.ClientInfo
	for _, cl := range plan.Clients {
		infos = append(infos, federation.ClientInfo{ID: cl.ID(), NumExamples: cl.NumExamples()})
	}
	if err := plan.Strategy.Init(infos); err != nil {
		t.Fatal(err)
	}
	return plan
}

func round(t *testing.T, plan *methods.Plan, r int, ids []int) []federation.FitResult {
	t.Helper()
	ins, err := plan.Strategy.Configure(r, ids)
	if err != nil {
		t.Fatal(err)
	}
	var res []federation.FitResult
	for _, id := range ids {
		fr, err := plan.Clients[id].Fit(context.Background(), federation.FitIns{Round: r, Params: ins[id]})
		if err != nil {
			t.Fatal(err)
		}
		res = append(res, federation.FitResult{ClientID: id, NumExamples: fr.NumExamples, Params: fr.Params})
	}
	if err := plan.Strategy.Aggregate(r, res, nil); err != nil {
		t.Fatal(err)
	}
	return res
}

func sameNamed(t *testing.T, what string, got, want tensor.Named) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d tensors, want %d", what, len(got), len(want))
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok || !tensor.SameShape(g.Shape, w.Shape) {
			t.Fatalf("%s: %q missing or reshaped", what, k)
		}
		for i := range w.Data {
			if math.Float32bits(g.Data[i]) != math.Float32bits(w.Data[i]) {
				t.Fatalf("%s: %s[%d] = %g, want %g (not bit-identical)", what, k, i, g.Data[i], w.Data[i])
			}
		}
	}
}

// TestResumeBitIdentical: three rounds straight equal two rounds, a save of
// every site's state and the server's, a fresh plan restored from it and the
// third round, bit for bit (client 2 sits out round 1); every upload is the
// context.
func TestResumeBitIdentical(t *testing.T) {
	schedule := [][]int{{0, 1, 2}, {0, 1}, {0, 1, 2}}
	straight := tensorPlan(t)
	for r, ids := range schedule {
		for _, fr := range round(t, straight, r, ids) {
			if _, ok := fr.Params[ParamCtx]; !ok || len(fr.Params) != 1 {
				t.Fatalf("client %d uploaded %d tensors, want the context only", fr.ClientID, len(fr.Params))
			}
		}
	}
	first := tensorPlan(t)
	round(t, first, 0, schedule[0])
	round(t, first, 1, schedule[1])
	var saved []tensor.Named
	for _, c := range first.Clients {
		st, err := c.State()
		if err != nil {
			t.Fatal(err)
		}
		saved = append(saved, st)
	}
	server := first.Strategy.State()
	resumed := tensorPlan(t)
	for i, c := range resumed.Clients {
		if err := c.LoadState(saved[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := resumed.Strategy.LoadState(server); err != nil {
		t.Fatal(err)
	}
	round(t, resumed, 2, schedule[2])
	for i := range straight.Clients {
		a, err := straight.Clients[i].State()
		if err != nil {
			t.Fatal(err)
		}
		b, err := resumed.Clients[i].State()
		if err != nil {
			t.Fatal(err)
		}
		sameNamed(t, "site state", b, a)
	}
	sameNamed(t, "global", resumed.Global(), straight.Global())
	moved := false
	for name, g := range straight.Global() {
		for i, v := range g.Data {
			if v != saved[0]["param/"+name].Data[i] {
				moved = true
			}
		}
	}
	if !moved {
		t.Error("the third round did not move the global prompt learner")
	}
}

// TestPredictorMatchesEvaluation: the Predictor built from a saved site
// scores pixels bit for bit as the evaluation scores their cached features.
func TestPredictorMatchesEvaluation(t *testing.T) {
	w, tok, err := assets.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	m := clip.New(w)
	classes := []string{"red_circle", "blue square", "green striped triangle"}
	env := &methods.Env{Model: m, Tok: tok, Template: "a photo of a {}.",
		Task: &protocol.Task{Dataset: &dataset.Dataset{Classes: classes}, Spaces: []protocol.Space{{Classes: []int{0, 1, 2}}}}}
	s := Method{}.DefaultConfig().(*Settings)
	cfg, err := s.config(m, tok, 3)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NCtx != 4 {
		t.Fatalf("ctx_init %q gave n_ctx %d, want 4", s.CtxInit, cfg.NCtx)
	}
	tokens, err := env.ClassPromptTokens(0, promptfed.Placeholder(cfg.NCtx))
	if err != nil {
		t.Fatal(err)
	}
	template, err := env.SpaceTokens(0)
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(m, tokens, template, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 3))
	saved := l.Params().Clone()
	for _, p := range saved {
		for i, v := range gradcheck.Rand(rng, len(p.Data), 0.05) {
			p.Data[i] += v
		}
	}
	if err := prompt.Load(l.Params(), saved); err != nil {
		t.Fatal(err)
	}
	S := m.W.Config.Vision.ImageSize
	const B = 4
	px := gradcheck.Rand(rng, B*3*S*S, 1)
	sl := &spaceLearner{Learner: l}
	if err := sl.Prepare(); err != nil {
		t.Fatal(err)
	}
	want, err := sl.Logits(methods.ImageRecords(m, methods.Features, px, B, nil), B)
	if err != nil {
		t.Fatal(err)
	}
	want = append([]float32(nil), want...)
	pr, err := Method{}.Predictor(methods.PredictEnv{Model: m, Tok: tok, Template: env.Template}, s, saved)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pr.Logits(px, B, classes)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d logits, want %d", len(got), len(want))
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("logit %d: predictor %g, evaluation %g", i, got[i], want[i])
		}
	}
	if _, err := (Method{}).Predictor(methods.PredictEnv{Model: m, Tok: tok}, s, tensor.Named{}); err == nil || !strings.Contains(err.Error(), ParamCtx) {
		t.Errorf("predictor without a context: %v", err)
	}
}

// TestSettings: bad keys are refused by name; without a tokenizer (bench,
// in-memory runs) ctx_init gives way to the random init of n_ctx.
func TestSettings(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"kgcoop.n_ctx=0", "kgcoop.n_ctx"},
		{"kgcoop.init_std=-1", "kgcoop.init_std"},
		{"kgcoop.w=-1", "kgcoop.w"},
	} {
		e := config.Default()
		e.Methods = []string{"kgcoop"}
		k, v, _ := strings.Cut(tc.set, "=")
		if err := e.Set(k, v); err != nil {
			t.Fatal(err)
		}
		if err := e.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %s", tc.set, err, tc.want)
		}
	}
	m := fixturetest.Model(t)
	cfg, err := (&Settings{NCtx: 3, CtxInit: "a photo of a", InitStd: 0.02}).config(m, nil, 1)
	if err != nil || cfg.NCtx != 3 || cfg.InitCtx != nil {
		t.Errorf("ctx_init without a tokenizer: n_ctx %d, init words %v, error %v; want the random init of n_ctx 3", cfg.NCtx, cfg.InitCtx != nil, err)
	}
}
