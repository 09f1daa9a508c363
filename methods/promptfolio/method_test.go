package promptfolio

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/assets"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/internal/methodtest"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/promptfl"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/tensor"
)

// TestRoundProductionPath runs the fixture round through the same code as
// `pfedmma run` and `pfedmma round`: clients upload prompt 0, the server
// averages it (8/12, 4/12), prompt 1 stays; each client's next start is
// [global; own prompt 1].
func TestRoundProductionPath(t *testing.T) {
	out := paritytest.Round(t, Method{}, "promptfolio/init.safetensors", []string{"promptfolio/round.safetensors"}, nil, "promptfolio/round.safetensors", 1e-4)
	ref, _ := paritytest.Read(t, td+"round.safetensors")
	init, _ := paritytest.Read(t, td+"init.safetensors")
	if g := out["global."+ParamCtx]; g == nil || !tensor.SameShape(g.Shape, []int{1, 8, 128}) {
		t.Fatalf("global context %v, want prompt 0 only", g)
	}
	for _, name := range []string{"client0.batch_losses", "client1.batch_losses"} {
		got, ok := out[name]
		if !ok {
			t.Fatalf("round produced no %s", name)
		}
		paritytest.RelValues(t, name, got.Data, ref[name].Data, 1e-4)
	}
	for i := range 2 {
		name := "client" + string(rune('0'+i)) + ".next." + ParamCtx
		got, ok := out[name]
		if !ok {
			t.Fatalf("round produced no %s", name)
		}
		paritytest.RelValues(t, name, got.Data, ref[name].Data, 1e-4)
		paritytest.RelValues(t, name+" (update)", paritytest.UpdateValues(got.Data, init[ParamCtx].Data), paritytest.UpdateValues(ref[name].Data, init[ParamCtx].Data), 1e-4)
	}
}

// tensorPlan builds the method on methodtest's random tiny CLIP over n
// in-memory clients of 10 − 2k images (3 classes).
func tensorPlan(t *testing.T, s *Settings, n int, opts train.Options) *methods.Plan {
	t.Helper()
	return methodtest.Build(t, Method{}, methodtest.PromptEnv(t, s.NCtx, n, opts), s)
}

func testSettings() *Settings { return &Settings{NCtx: 2, Theta: 0.4, InitStd: 0.02} }

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

// TestRoundKeepsLocalAndWeighsSelected: clients upload prompt 0 only; the
// server's global is Σ n_i/n · p_i over the clients of the round whatever
// their order (clients 2 and 0 of 3, in that order: the reference code's
// index mismatch would weigh them wrongly); the next round installs it as
// prompt 0 and leaves each client's prompt 1 as trained.
func TestRoundKeepsLocalAndWeighsSelected(t *testing.T) {
	plan := tensorPlan(t, testSettings(), 3, testOpts())
	res := methodtest.Round(t, plan, 0, []int{2, 0})
	var n float64
	for _, r := range res {
		if len(r.Params) != 1 || !tensor.SameShape(r.Params[ParamCtx].Shape, []int{1, 2, 8}) {
			t.Fatalf("client %d uploaded %v, want prompt 0 only", r.ClientID, r.Params)
		}
		n += float64(r.NumExamples)
	}
	want := make([]float32, 2*8)
	for _, r := range res {
		for i, v := range r.Params[ParamCtx].Data {
			want[i] += float32(float64(r.NumExamples)/n) * v
		}
	}
	paritytest.RelValues(t, "global", plan.Global()[ParamCtx].Data, want, 1e-6)
	local := map[int][]float32{}
	for i := range plan.Clients {
		p, _ := plan.Site(i)
		local[i] = append([]float32(nil), p[ParamCtx].Data[16:]...)
	}
	methodtest.Round(t, plan, 1, []int{0, 1})
	c1, _ := plan.Site(2) // not selected: unchanged
	methodtest.SameNamed(t, "idle client", tensor.Named{"l": {Shape: []int{16}, Data: c1[ParamCtx].Data[16:]}}, tensor.Named{"l": {Shape: []int{16}, Data: local[2]}})
}

// TestPredictorMatchesEvaluation: the Predictor built from a site's saved
// parameters scores pixels exactly as the client's learner scores their
// cached features during evaluation.
func TestPredictorMatchesEvaluation(t *testing.T) {
	w, tok, err := assets.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	m := clip.New(w)
	s := &Settings{NCtx: 4, Theta: 0.3, InitStd: 0.02}
	classes := []string{"red_circle", "blue square", "green triangle"}
	tokens, err := methods.PredictEnv{Model: m, Tok: tok}.ClassPromptTokens(classes, client.Placeholder(s.NCtx))
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(m, tokens, s.config(3))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 3))
	copy(l.ctx.Data, gradcheck.Rand(rng, len(l.ctx.Data), 0.05))
	S := m.W.Config.Vision.ImageSize
	const B = 4
	px := gradcheck.Rand(rng, B*3*S*S, 1)
	if err := l.Prepare(); err != nil {
		t.Fatal(err)
	}
	want, err := l.Logits(m.EncodeImage(px, B), B)
	if err != nil {
		t.Fatal(err)
	}
	want = append([]float32(nil), want...)
	pr, err := Method{}.Predictor(methods.PredictEnv{Model: m, Tok: tok, Template: "a photo of a {}."}, s, l.Params().Clone())
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
	if _, err := (Method{}).Predictor(methods.PredictEnv{Model: m, Tok: tok}, s, tensor.Named{}); err == nil || !strings.Contains(err.Error(), ParamCtx) {
		t.Errorf("predictor without the prompts: %v", err)
	}
}

// TestSettingsCheck: bad settings are named by their keys.
func TestSettingsCheck(t *testing.T) {
	for _, s := range []*Settings{{NCtx: 0, Theta: 0.4}, {NCtx: 8, Theta: 1.2}, {NCtx: 8, Theta: 0.4, InitStd: -1}} {
		if _, err := settings(s); err == nil {
			t.Errorf("%+v accepted", s)
		}
	}
	if _, err := settings(testSettings()); err != nil {
		t.Error(err)
	}
}

// TestRoundsReduceToPromptFLAndCoOp: through the production round, θ = 0
// trains and averages prompt 0 exactly as PromptFL trains and averages its
// context, and θ = 1 trains each client's prompt 1 as CoOp (PromptFL's
// learner, trained locally) does.
func TestRoundsReduceToPromptFLAndCoOp(t *testing.T) {
	const fx = paritytest.Testdata + "promptfolio/"
	m := paritytest.Model(t)
	for p, theta := range []string{"0", "1"} {
		f, err := parity.Load(m, fx+"init.safetensors", []string{fx + "round.safetensors"}, []string{"theta=" + theta})
		if err != nil {
			t.Fatal(err)
		}
		out, err := parity.RunRound(context.Background(), Method{}, f)
		if err != nil {
			t.Fatal(err)
		}
		ctx := f.Params[ParamCtx]
		n := len(ctx.Data) / 2
		pf := *f
		pf.Params = tensor.Named{promptfl.ParamCtx: {Shape: []int{ctx.Shape[1], ctx.Shape[2]}, Data: ctx.Data[p*n : (p+1)*n]}}
		ref, err := parity.RunRound(context.Background(), promptfl.Method{}, &pf)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			name := fmt.Sprintf("client%d.trained.", i)
			got := out[name+ParamCtx].Data[p*n : (p+1)*n]
			paritytest.RelValues(t, "θ="+theta+" "+name, got, ref[name+promptfl.ParamCtx].Data, 1e-5)
			paritytest.RelValues(t, "θ="+theta+" "+name+" (update)", paritytest.UpdateValues(got, ctx.Data[p*n:(p+1)*n]), paritytest.UpdateValues(ref[name+promptfl.ParamCtx].Data, ctx.Data[p*n:(p+1)*n]), 1e-4)
		}
		if p == 0 {
			paritytest.RelValues(t, "θ=0 global", out["global."+ParamCtx].Data, ref["global."+promptfl.ParamCtx].Data, 1e-5)
		}
	}
}
