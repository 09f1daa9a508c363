package kgcoop

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/assets"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/internal/methodtest"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/prefixcache"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tensor"
)

// tensorPlan builds KgCoOp on the tiny CLIP over three in-memory clients
// (the fixture's class prompts).
func tensorPlan(t *testing.T) *methods.Plan {
	t.Helper()
	m := paritytest.Model(t)
	ref, _ := paritytest.Read(t, dir+"step.safetensors")
	tokens, err := prompt.Ints(ref, "tokens")
	if err != nil {
		t.Fatal(err)
	}
	C := len(tokens) / m.W.Config.Text.ContextLength
	clients := methodtest.TensorClients(rand.New(rand.NewPCG(8, 1)), 3, 5, m.W.Config.Vision.ImageSize, C)
	opts := train.Options{Epochs: 1, Batch: 2, Optimizer: "sgd", LR: 0.05, Momentum: 0.9, WD: 5e-4}
	env, err := parity.TensorEnv(m, methods.Features, tokens, C, clients, opts, 5)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.TrainStore.Close() })
	return methodtest.Build(t, Method{}, env, &Settings{NCtx: 4, W: 8, InitStd: 0.02})
}

// TestResumeBitIdentical: three rounds straight equal two rounds, a save of
// every site's state and the server's, a fresh plan restored from it and the
// third round, bit for bit (client 2 sits out round 1); every upload is the
// context.
func TestResumeBitIdentical(t *testing.T) {
	r := methodtest.Resume(t, func() *methods.Plan { return tensorPlan(t) }, [3][]int{{0, 1, 2}, {0, 1}, {0, 1, 2}})
	for _, ups := range r.Uploads {
		for _, fr := range ups {
			if _, ok := fr.Params[ParamCtx]; !ok || len(fr.Params) != 1 {
				t.Fatalf("client %d uploaded %d tensors, want the context only", fr.ClientID, len(fr.Params))
			}
		}
	}
	r.GlobalMoved(t, "prompt learner")
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
	tokens, err := env.ClassPromptTokens(0, client.Placeholder(cfg.NCtx))
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
	if err := l.Prepare(); err != nil {
		t.Fatal(err)
	}
	want, err := l.Logits(prefixcache.ImageRecords(m, methods.Features, px, B, nil), B)
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
	methodtest.SameLogits(t, got, want)
	if _, err := (Method{}).Predictor(methods.PredictEnv{Model: m, Tok: tok}, s, tensor.Named{}); err == nil || !strings.Contains(err.Error(), ParamCtx) {
		t.Errorf("predictor without a context: %v", err)
	}
}

// TestSettings: bad keys are refused by name; without a tokenizer (bench,
// in-memory runs) ctx_init gives way to the random init of n_ctx.
func TestSettings(t *testing.T) {
	methodtest.RejectsSettings(t, "kgcoop", [][2]string{
		{"kgcoop.n_ctx=0", "kgcoop.n_ctx"},
		{"kgcoop.init_std=-1", "kgcoop.init_std"},
		{"kgcoop.w=-1", "kgcoop.w"},
	})
	m := paritytest.Model(t)
	cfg, err := (&Settings{NCtx: 3, CtxInit: "a photo of a", InitStd: 0.02}).config(m, nil, 1)
	if err != nil || cfg.NCtx != 3 || cfg.InitCtx != nil {
		t.Errorf("ctx_init without a tokenizer: n_ctx %d, init words %v, error %v; want the random init of n_ctx 3", cfg.NCtx, cfg.InitCtx != nil, err)
	}
}
