package fedpha

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/assets"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/internal/methodtest"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/tensor"
)

// TestRoundProductionPath runs the fixture round through the same code as
// `pfedmma run` and `pfedmma round`: clients upload the global context, the
// server averages it (8/12, 4/12), the local context stays; each client's
// next start is [global, own local].
func TestRoundProductionPath(t *testing.T) {
	out := paritytest.Round(t, Method{}, "fedpha/init.safetensors", []string{"fedpha/round.safetensors"}, nil, "fedpha/round.safetensors", 1e-4)
	if _, ok := out["global."+ParamLocal]; ok {
		t.Error("the server holds a local context")
	}
	ref, _ := paritytest.Read(t, td+"round.safetensors")
	init, _ := paritytest.Read(t, td+"init.safetensors")
	for _, name := range []string{"client0.batch_losses", "client1.batch_losses"} {
		got, ok := out[name]
		if !ok {
			t.Fatalf("round produced no %s", name)
		}
		paritytest.RelValues(t, name, got.Data, ref[name].Data, 1e-4)
	}
	for i := range 2 {
		for _, p := range []string{ParamGlobal, ParamLocal} {
			name := "client" + string(rune('0'+i)) + ".next." + p
			got, ok := out[name]
			if !ok {
				t.Fatalf("round produced no %s", name)
			}
			paritytest.RelValues(t, name, got.Data, ref[name].Data, 1e-4)
			paritytest.RelValues(t, name+" (update)", paritytest.UpdateValues(got.Data, init[p].Data), paritytest.UpdateValues(ref[name].Data, init[p].Data), 1e-4)
		}
	}
}

// tensorPlan builds the method on methodtest's random tiny CLIP over n
// in-memory clients of 10 − 2k images (3 classes).
func tensorPlan(t *testing.T, s *Settings, n int, opts train.Options) *methods.Plan {
	t.Helper()
	return methodtest.Build(t, Method{}, methodtest.PromptEnv(t, s.NCtx, n, opts), s)
}

func testSettings() *Settings {
	return &Settings{NCtx: 3, Ratio: 0.5, Alpha: 1, LambdaPull: 1, LambdaPush: 1, InitStd: 0.3}
}

func testOpts() train.Options {
	return train.Options{Epochs: 1, Batch: 4, Optimizer: "sgd", LR: 0.05, Momentum: 0.9, WD: 5e-4}
}

// TestResumeBitIdentical: three rounds straight equal two rounds, a save of
// every client (parameters, momentum, random state) and the server, a fresh
// plan restored from it, and the third round, bit for bit.
func TestResumeBitIdentical(t *testing.T) {
	ids := []int{0, 1, 2}
	methodtest.Resume(t, func() *methods.Plan { return tensorPlan(t, testSettings(), 3, testOpts()) }, [3][]int{ids, ids, ids})
}

// TestLocalStaysPrivate: clients upload the global context only; the next
// round installs the server's average and leaves each local context as
// trained.
func TestLocalStaysPrivate(t *testing.T) {
	plan := tensorPlan(t, testSettings(), 3, testOpts())
	res := methodtest.Round(t, plan, 0, []int{2, 0})
	for _, r := range res {
		if len(r.Params) != 1 || r.Params[ParamGlobal] == nil {
			t.Fatalf("client %d uploaded %v, want the global context only", r.ClientID, r.Params)
		}
	}
	before, _ := plan.Site(0)
	methodtest.Round(t, plan, 1, []int{1})
	after, _ := plan.Site(0) // not selected in round 1: unchanged
	methodtest.SameNamed(t, "idle client", after, before)
	c := plan.Clients[0].(*client.Client)
	if err := c.ReceiveShared(plan.Global()); err != nil {
		t.Fatal(err)
	}
	methodtest.SameNamed(t, "local after receive", tensor.Named{ParamLocal: c.P[ParamLocal]}, tensor.Named{ParamLocal: before[ParamLocal]})
	methodtest.SameNamed(t, "global after receive", tensor.Named{ParamGlobal: c.P[ParamGlobal]}, plan.Global())
}

// TestPredictorMatchesEvaluation: the Predictor built from a site's saved
// parameters scores pixels exactly as the client's learner scores their
// cached features (the personal model: the local prompt); the global
// scorer uses the global prompt.
func TestPredictorMatchesEvaluation(t *testing.T) {
	w, tok, err := assets.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	m := clip.New(w)
	s := DefaultConfig()
	s.NCtx = 4
	classes := []string{"red_circle", "blue square", "green triangle"}
	tokens, err := methods.PredictEnv{Model: m, Tok: tok}.ClassPromptTokens(classes, client.Placeholder(s.NCtx))
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(m, tokens, s)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 3))
	copy(l.local.Data, gradcheck.Rand(rng, len(l.local.Data), 0.05))
	S := m.W.Config.Vision.ImageSize
	const B = 4
	px := gradcheck.Rand(rng, B*3*S*S, 1)
	if err := l.Prepare(); err != nil {
		t.Fatal(err)
	}
	img := m.EncodeImage(px, B)
	want, err := l.Logits(img, B)
	if err != nil {
		t.Fatal(err)
	}
	want = append([]float32(nil), want...)
	pr, err := Method{}.Predictor(methods.PredictEnv{Model: m, Tok: tok, Template: "a photo of a {}."}, fromConfig(s), l.Params().Clone())
	if err != nil {
		t.Fatal(err)
	}
	got, err := pr.Logits(px, B, classes)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("logit %d: predictor %g, evaluation %g", i, got[i], want[i])
		}
	}
	if err := l.PrepareGlobal(); err != nil {
		t.Fatal(err)
	}
	glob, _ := l.Logits(img, B)
	same := true
	for i := range glob {
		same = same && glob[i] == want[i]
	}
	if same {
		t.Error("the global prompt scores like the local one")
	}
	if _, err := (Method{}).Predictor(methods.PredictEnv{Model: m, Tok: tok}, fromConfig(s), tensor.Named{ParamGlobal: l.global}); err == nil || !strings.Contains(err.Error(), ParamLocal) {
		t.Errorf("predictor without the local prompt: %v", err)
	}
}

// TestGlobalScorer: the plan's global model scores with the server's
// global context alone.
func TestGlobalScorer(t *testing.T) {
	plan := tensorPlan(t, testSettings(), 2, testOpts())
	methodtest.Round(t, plan, 0, []int{0, 1})
	sc, err := plan.GlobalScorer()
	if err != nil {
		t.Fatal(err)
	}
	img := gradcheck.Rand(rand.New(rand.NewPCG(2, 2)), 3*6, 1)
	got, err := sc.Logits(0, img, 3)
	if err != nil {
		t.Fatal(err)
	}
	got = append([]float32(nil), got...)
	l, err := promptfedLearner(plan)
	if err != nil {
		t.Fatal(err)
	}
	copy(l.local.Data, plan.Global()[ParamGlobal].Data) // the local slot holds the global context
	if err := l.Prepare(); err != nil {
		t.Fatal(err)
	}
	want, _ := l.Logits(img, 3)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("logit %d: global scorer %g, global prompt %g", i, got[i], want[i])
		}
	}
}

func promptfedLearner(plan *methods.Plan) (*Learner, error) {
	pl, err := plan.Clients[0].(*client.Client).Learner()
	if err != nil {
		return nil, err
	}
	return pl.(*Learner), nil
}

// TestSettingsCheck: bad settings are refused.
func TestSettingsCheck(t *testing.T) {
	for _, s := range []*Settings{{NCtx: 0, Ratio: 0.8}, {NCtx: 8, Ratio: 1.2}, {NCtx: 8, Ratio: 0.8, Alpha: -1}, {NCtx: 8, Ratio: 0.8, LambdaPush: -1}} {
		if _, err := settings(s); err == nil {
			t.Errorf("%+v accepted", s)
		}
	}
	if _, err := settings(testSettings()); err != nil {
		t.Error(err)
	}
}
