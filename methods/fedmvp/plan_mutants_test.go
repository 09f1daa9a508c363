package fedmvp

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/assets"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/internal/methodtest"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/prefixcache"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tensor"
)

// The tests of this file kill mutants `make mutants` found alive in
// methods/fedmvp's plan (issue 35).

// siteLoRA is client i's LoRA switch as its site keeps it.
func siteLoRA(t *testing.T, plan *methods.Plan, i int) bool {
	t.Helper()
	kept, err := plan.Site(i)
	if err != nil {
		t.Fatal(err)
	}
	return kept[StateLoRA].Data[0] != 0
}

// TestSwitchNeedsLossBelowThreshold: a client switches to LoRA when its
// last batch's loss is below lora_threshold, not when it equals it (the
// same round run again with the threshold at that loss exactly, and just
// above it).
func TestSwitchNeedsLossBelowThreshold(t *testing.T) {
	s := testSettings()
	s.LoRAThreshold = 0
	plan := tensorPlan(t, s)
	round(t, plan, 0)
	last := siteOf(plan.Clients[0].(*client.Client)).last
	if !(last > 0) {
		t.Fatalf("last batch loss %v", last)
	}
	for _, tc := range []struct {
		threshold float64
		lora      bool
	}{{last, false}, {math.Nextafter(last, math.Inf(1)), true}} {
		s := testSettings()
		s.LoRAThreshold = tc.threshold
		plan := tensorPlan(t, s)
		round(t, plan, 0)
		if got := siteOf(plan.Clients[0].(*client.Client)).last; got != last {
			t.Fatalf("the rerun's last loss %v differs from %v", got, last)
		}
		if got := siteLoRA(t, plan, 0); got != tc.lora {
			t.Errorf("loss %v, threshold %v: switched %v, want %v", last, tc.threshold, got, tc.lora)
		}
	}
}

// TestFlipProbZeroOneDrawNoCoin: flip_prob 0 and 1 decide the consistency
// target without drawing from the client's generator (which also orders
// its examples), so after a round the generator is where it is with the
// other certain setting; flip_prob 0.5 draws a coin a batch.
func TestFlipProbZeroOneDrawNoCoin(t *testing.T) {
	rng := map[float64][]float32{}
	for _, p := range []float64{0, 1, 0.5} {
		s := testSettings()
		s.FlipProb = p
		plan := tensorPlan(t, s)
		round(t, plan, 0)
		st, err := plan.Clients[0].State()
		if err != nil {
			t.Fatal(err)
		}
		rng[p] = st["rng"].Data
	}
	if !slices.Equal(rng[0], rng[1]) {
		t.Error("flip_prob 0 and 1 leave the client's generator in different states")
	}
	if slices.Equal(rng[0], rng[0.5]) {
		t.Error("flip_prob 0.5 leaves the generator where flip_prob 0 does")
	}
}

// TestFlipCoinDirection: a batch's consistency target is the mirror with
// probability flip_prob: with flip_prob 1e-9 the last batch's coin says
// no, with 1 − 1e-9 yes (both draw a coin).
func TestFlipCoinDirection(t *testing.T) {
	for _, tc := range []struct {
		p    float64
		flip bool
	}{{1e-9, false}, {1 - 1e-9, true}} {
		s := testSettings()
		s.FlipProb = tc.p
		plan := tensorPlan(t, s)
		round(t, plan, 0)
		l, err := plan.Clients[0].(*client.Client).Learner()
		if err != nil {
			t.Fatal(err)
		}
		if got := l.(*Learner).Flip; got != tc.flip {
			t.Errorf("flip_prob %g: the last batch flipped %v, want %v", tc.p, got, tc.flip)
		}
	}
}

// TestLoadStateSwitch: a saved site's switch is restored (1: LoRA) and a
// state without it, or with more than one value, is refused naming it.
func TestLoadStateSwitch(t *testing.T) {
	s := testSettings()
	s.LoRAThreshold = 1e9
	plan := tensorPlan(t, s)
	round(t, plan, 0)
	st, err := plan.Clients[0].State()
	if err != nil {
		t.Fatal(err)
	}
	fresh := tensorPlan(t, testSettings())
	if err := fresh.Clients[0].LoadState(st); err != nil {
		t.Fatal(err)
	}
	if !siteLoRA(t, fresh, 0) {
		t.Error("the restored site lost its switch to LoRA")
	}
	for _, bad := range []*tensor.Tensor{nil, {Shape: []int{2}, Data: []float32{1, 1}}} {
		b := tensor.Named{}
		for k, v := range st {
			b[k] = v
		}
		delete(b, StateLoRA)
		if bad != nil {
			b[StateLoRA] = bad
		}
		if err := tensorPlan(t, testSettings()).Clients[0].LoadState(b); err == nil || !strings.Contains(err.Error(), StateLoRA) {
			t.Errorf("state with switch %v: error %v, want one naming %s", bad, err, StateLoRA)
		}
	}
}

// TestStepLabelRange: labels 0 and C−1 train; −1 and C are refused naming
// the range; too few record values are refused.
func TestStepLabelRange(t *testing.T) {
	l, rng := randomLearner(t, Config{Alpha: 1, Heads: 2, Rank: 2, Prompts: 2, Seed: 1}, 3)
	rec := gradcheck.Rand(rng, 2*l.RecordLen(), 1)
	if _, _, _, err := l.Step(rec, []int{0, 2}); err != nil {
		t.Errorf("labels 0 and 2: %v", err)
	}
	for _, bad := range [][]int{{0, 3}, {-1, 0}} {
		if _, _, _, err := l.Step(rec, bad); err == nil || !strings.Contains(err.Error(), "outside 0..2") {
			t.Errorf("labels %v: error %v, want one naming 0..2", bad, err)
		}
	}
	if _, _, _, err := l.Step(rec[:len(rec)-1], []int{0, 1}); err == nil || !strings.Contains(err.Error(), "record values") {
		t.Errorf("a record short: %v", err)
	}
	if err := l.Prepare(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Logits(rec[:len(rec)-1], 2); err == nil || !strings.Contains(err.Error(), "record values") {
		t.Errorf("Logits, a record short: %v", err)
	}
	if _, err := l.Logits(rec, 2); err != nil {
		t.Errorf("Logits of two whole records: %v", err)
	}
}

// TestPredictorMatchesLearner: the Predictor built from a saved site (its
// prompt learner, moved away from the initial draw, and its LoRA switch)
// scores pixels exactly as a learner holding them scores their records,
// with and without the switch; a saved site without the linear map is
// refused naming it.
func TestPredictorMatchesLearner(t *testing.T) {
	w, tok, err := assets.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	m := clip.New(w)
	s := testSettings()
	classes := []string{"red striped triangle", "golden_retriever"}
	pe := methods.PredictEnv{Model: m, Tok: tok, Template: "a photo of a {}."}
	tokens, rows, err := descriptionTokens(tok, m.W.Config.Text.ContextLength, classes, pe.Template)
	if err != nil {
		t.Fatal(err)
	}
	text, err := TextFeatures(m, tokens)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(2, 9))
	S := m.W.Config.Vision.ImageSize
	const B = 2
	px := gradcheck.Rand(rng, B*3*S*S, 1)
	for _, lora := range []bool{false, true} {
		l, err := New(m, text, rows, len(classes), s.config(0))
		if err != nil {
			t.Fatal(err)
		}
		saved := tensor.Named{}
		for name, p := range l.Params() {
			for i := range p.Data {
				p.Data[i] += float32(rng.NormFloat64() * 0.1)
			}
			saved[name] = p.Clone()
		}
		saved[StateLoRA] = loraTensor(lora)
		l.LoRA = lora
		if err := l.Prepare(); err != nil {
			t.Fatal(err)
		}
		want, err := l.Logits(prefixcache.ImageRecords(m, methods.Embeddings, px, B, nil), B)
		if err != nil {
			t.Fatal(err)
		}
		pr, err := Method{}.Predictor(pe, s, saved)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pr.Logits(px, B, classes)
		if err != nil {
			t.Fatal(err)
		}
		methodtest.SameLogits(t, got, want)
		delete(saved, ParamLinW)
		if _, err := (Method{}).Predictor(pe, s, saved); err == nil || !strings.Contains(err.Error(), ParamLinW) {
			t.Errorf("a site without the linear map: %v", err)
		}
	}
}

// TestEvaluateScoresTrainedSite: a site's evaluation scores with its
// prompt learner and LoRA switch as they are after training (the keys'
// side recomputed): the logits equal a learner's holding what the site
// keeps, on the same records.
func TestEvaluateScoresTrainedSite(t *testing.T) {
	s := testSettings()
	s.LoRAThreshold = 1e9 // every client switches in round 0
	plan, env := tensorPlanEnv(t, s, func(env *methods.Env) {
		ct := &env.Task.Clients[0]
		set := &protocol.EvalSet{Name: "local", Space: 0, Labels: ct.Labels}
		for _, item := range ct.Train {
			set.Images = append(set.Images, len(env.Task.Test))
			env.TestRecs[len(env.Task.Test)] = env.TrainRecs[item][0]
			env.Task.Test = append(env.Task.Test, env.Task.Train[item])
		}
		ct.Evals = []*protocol.EvalSet{set}
	})
	var got []float32
	ctx := methods.WithObserver(context.Background(), &methods.Observer{
		OnEvaluate: func(_ *protocol.ClientTask, logits [][]float32) { got = slices.Clone(logits[0]) }})
	round(t, plan, 0)
	round(t, plan, 1)
	if _, err := plan.Clients[0].Evaluate(ctx, federation.EvaluateIns{}); err != nil {
		t.Fatal(err)
	}
	site, err := plan.Site(0)
	if err != nil {
		t.Fatal(err)
	}
	text, err := TextFeatures(env.Model, s.descTokens)
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(env.Model, text, s.descClass, 3, s.config(env.Seed))
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range l.Params() {
		copy(p.Data, site[name].Data)
	}
	l.LoRA = site[StateLoRA].Data[0] != 0
	if !l.LoRA {
		t.Fatal("client 0 did not switch to LoRA")
	}
	if err := l.Prepare(); err != nil {
		t.Fatal(err)
	}
	set := env.Task.Clients[0].Evals[0]
	var recs []int
	for _, img := range set.Images {
		recs = append(recs, env.TestRecs[img])
	}
	x := make([]float32, len(recs)*l.RecordLen())
	if err := env.TestStore.GetBatch(recs, x); err != nil {
		t.Fatal(err)
	}
	want, err := l.Logits(x, len(recs))
	if err != nil {
		t.Fatal(err)
	}
	methodtest.SameLogits(t, got, want)
}
