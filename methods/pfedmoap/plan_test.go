package pfedmoap

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/pfedmma/pfedmma/assets"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/protocol"
	"testing"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/internal/methodtest"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/tensor"
)

// smallPlan builds pFedMoAP on methodtest.PromptEnv's three clients (image
// features of width 6; a gate 3 wide, so the pool takes every second
// feature) with two experts per client.
func smallPlan(t *testing.T, reset bool) *methods.Plan {
	t.Helper()
	opts := train.Options{Epochs: 1, Batch: 4, Optimizer: "sgd", LR: 0.05, Momentum: 0.9, WD: 5e-4, ResetOptimizer: reset}
	env := methodtest.PromptEnv(t, 2, 3, opts)
	s := fromConfig(DefaultConfig())
	s.NCtx, s.GateWidth, s.GateHeads, s.NumExperts = 2, 3, 1, 3
	return methodtest.Build(t, Method{}, env, s)
}

// TestResumeBitIdentical: three rounds straight equal two rounds, a save of
// every site (its gate optimizer, the experts it downloaded, the round) and
// of the server (the pool), a fresh plan restored from it and the third
// round, bit for bit; client 2 sits the third round out, so its state is
// compared as restored.
func TestResumeBitIdentical(t *testing.T) {
	schedule := [3][]int{{0, 1, 2}, {0, 1, 2}, {0, 1}}
	straight := smallPlan(t, false)
	for r, ids := range schedule {
		methodtest.Round(t, straight, r, ids)
	}
	first := smallPlan(t, false)
	methodtest.Round(t, first, 0, schedule[0])
	methodtest.Round(t, first, 1, schedule[1])
	resumed := smallPlan(t, false)
	for i, c := range first.Clients {
		st, err := c.State()
		if err != nil {
			t.Fatal(err)
		}
		var experts int
		for name := range st {
			if strings.Contains(name, "moap/expert/") {
				experts++
			}
		}
		if experts != 2 {
			t.Errorf("client %d saved %d experts after round 1, want 2", i, experts)
		}
		if err := resumed.Clients[i].LoadState(st); err != nil {
			t.Fatal(err)
		}
	}
	if err := resumed.Strategy.LoadState(first.Strategy.State()); err != nil {
		t.Fatal(err)
	}
	methodtest.Round(t, resumed, 2, schedule[2])
	for i := range straight.Clients {
		a, err := straight.Clients[i].State()
		if err != nil {
			t.Fatal(err)
		}
		b, err := resumed.Clients[i].State()
		if err != nil {
			t.Fatal(err)
		}
		methodtest.SameNamed(t, "site state", b, a)
		sa, err := straight.Site(i)
		if err != nil {
			t.Fatal(err)
		}
		sb, err := resumed.Site(i)
		if err != nil {
			t.Fatal(err)
		}
		methodtest.SameNamed(t, "site", sb, sa)
	}
	methodtest.SameNamed(t, "server", resumed.Strategy.State(), straight.Strategy.State())
}

// gateSteps is client i's gate optimizer step count.
func gateSteps(t *testing.T, plan *methods.Plan, i int) int {
	t.Helper()
	c := plan.Clients[i].(*client.Client)
	return c.Site.(*siteState).opt.Steps()
}

// TestGateOptimizerReset: the gate's SGD is fresh at the start of each
// round with train.reset_optimizer and keeps its state across rounds
// without it (client 0: 10 images in batches of 4 = 3 steps a round). The
// gate takes no step in round 0 (no experts yet).
func TestGateOptimizerReset(t *testing.T) {
	for _, reset := range []bool{false, true} {
		plan := smallPlan(t, reset)
		ids := []int{0, 1, 2}
		methodtest.Round(t, plan, 0, ids)
		if got := gateSteps(t, plan, 0); got != 0 {
			t.Errorf("reset %v: %d gate steps in round 0 (no experts), want 0", reset, got)
		}
		methodtest.Round(t, plan, 1, ids)
		methodtest.Round(t, plan, 2, ids)
		want := 6
		if reset {
			want = 3
		}
		if got := gateSteps(t, plan, 0); got != want {
			t.Errorf("reset %v: %d gate steps after rounds 1 and 2, want %d", reset, got, want)
		}
	}
}

// TestLoadExtraEntries: a saved site's expert entries are numbered
// 0..1000; another number, or none, is refused naming the entry.
func TestLoadExtraEntries(t *testing.T) {
	plan := smallPlan(t, false)
	ids := []int{0, 1, 2}
	methodtest.Round(t, plan, 0, ids)
	methodtest.Round(t, plan, 1, ids)
	st, err := plan.Clients[0].State()
	if err != nil {
		t.Fatal(err)
	}
	var key string
	for name := range st {
		if strings.HasSuffix(name, "moap/expert/1") {
			key = name
		}
	}
	if key == "" {
		t.Fatalf("no expert 1 in the saved state %v", keys(st))
	}
	prefix := strings.TrimSuffix(key, "1")
	for _, tc := range []struct {
		entry string
		ok    bool
	}{{"1000", true}, {"1001", false}, {"-1", false}, {"x", false}} {
		bad := tensor.Named{}
		for k, v := range st {
			bad[k] = v
		}
		bad[prefix+tc.entry] = st[key]
		fresh := smallPlan(t, false)
		err := fresh.Clients[0].LoadState(bad)
		if tc.ok && err != nil {
			t.Errorf("entry %q: %v, want accepted", tc.entry, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "moap/expert/"+tc.entry)) {
			t.Errorf("entry %q: error %v, want one naming it", tc.entry, err)
		}
	}
}

func keys(n tensor.Named) []string {
	var out []string
	for k := range n {
		out = append(out, k)
	}
	return out
}

// TestSettingsCheck: the run configuration refuses gate heads that do not
// divide the width (and zero heads, without dividing by zero) and an
// unknown class-token position, naming the key; it takes an empty position
// and heads that divide the width.
func TestSettingsCheck(t *testing.T) {
	methodtest.RejectsSettings(t, "pfedmoap", [][2]string{
		{"pfedmoap.gate_heads=3", "gate_heads"},
		{"pfedmoap.gate_heads=0", "gate_heads"},
		{"pfedmoap.class_token_position=diagonal", "class_token_position"}})
	for _, set := range [][2]string{{"class_token_position", ""}, {"class_token_position", "front"}, {"gate_heads", "4"}} {
		e := config.Default()
		e.Methods = []string{"pfedmoap"}
		if err := e.Set("pfedmoap."+set[0], set[1]); err != nil {
			t.Fatal(err)
		}
		if err := e.Validate(); err != nil {
			t.Errorf("%s=%q refused: %v", set[0], set[1], err)
		}
	}
}

// TestCheckTask: num_experts may equal the number of clients (every
// client's prompt in the pool) but not exceed it, naming the key; bad
// settings are refused before the count is looked at.
func TestCheckTask(t *testing.T) {
	s := fromConfig(DefaultConfig())
	if err := (Method{}).CheckTask(s, s.NumExperts); err != nil {
		t.Errorf("num_experts = clients: %v", err)
	}
	if err := (Method{}).CheckTask(s, s.NumExperts-1); err == nil || !strings.Contains(err.Error(), "pfedmoap.num_experts") {
		t.Errorf("num_experts = clients + 1: %v", err)
	}
	s.Lambda = -1
	if err := (Method{}).CheckTask(s, 100); err == nil || !strings.Contains(err.Error(), "lambda") {
		t.Errorf("lambda −1: %v", err)
	}
}

// TestPredictorMatchesLearner: the Predictor built from a saved site (its
// prompt, its gate and the two experts it downloaded last, all non-zero)
// scores pixels exactly as a learner holding them scores their image
// features; a saved expert holding another tensor is refused.
func TestPredictorMatchesLearner(t *testing.T) {
	w, tok, err := assets.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	m := clip.New(w)
	s := fromConfig(DefaultConfig())
	s.NCtx, s.GateWidth, s.GateHeads, s.NumExperts = 4, m.W.Config.EmbedDim/2, 2, 3
	cfg := s.config(0)
	classes := []string{"red_circle", "blue square", "green triangle"}
	pe := methods.PredictEnv{Model: m, Tok: tok, Template: "a photo of a {}."}
	tokens, err := pe.ClassPromptTokens(classes, client.Placeholder(s.NCtx))
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(m, tokens, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(4, 5))
	saved := tensor.Named{}
	for name, p := range l.Params() {
		copy(p.Data, gradcheck.Rand(rng, len(p.Data), 0.3))
		saved[name] = p.Clone()
	}
	var experts [][]float32
	for i := range 2 {
		e := gradcheck.Rand(rng, len(l.ctx.Data), 0.3)
		experts = append(experts, e)
		saved[strategy.ExpertName(i, ParamCtx)] = &tensor.Tensor{Shape: l.ctx.Shape, Data: e}
	}
	if err := l.SetExperts(experts); err != nil {
		t.Fatal(err)
	}
	S := m.W.Config.Vision.ImageSize
	const B = 3
	px := gradcheck.Rand(rng, B*3*S*S, 1)
	want, err := l.Logits(append([]float32(nil), m.EncodeImage(px, B)...), B)
	if err != nil {
		t.Fatal(err)
	}
	want = slices.Clone(want)
	pr, err := Method{}.Predictor(pe, s, saved)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pr.Logits(px, B, classes)
	if err != nil {
		t.Fatal(err)
	}
	methodtest.SameLogits(t, got, want)
	// the evaluation path: Prepare computes the text features once
	sl := &clientLearner{Learner: l}
	if err := sl.Prepare(); err != nil {
		t.Fatal(err)
	}
	ev, err := sl.Logits(append([]float32(nil), m.EncodeImage(px, B)...), B)
	if err != nil {
		t.Fatal(err)
	}
	methodtest.SameLogits(t, ev, want)
	saved[strategy.ExpertName(1, "other")] = saved[ParamCtx]
	if _, err := (Method{}).Predictor(pe, s, saved); err == nil || !strings.Contains(err.Error(), "expert 1") {
		t.Errorf("an expert holding two tensors: %v", err)
	}
}

// TestEvaluateScoresTrainedSite: a site's evaluation scores with its
// prompt, gate and experts as they are after training (the text features
// recomputed for the trained prompt): the logits equal a learner's holding
// what the site keeps, on the same image features.
func TestEvaluateScoresTrainedSite(t *testing.T) {
	opts := train.Options{Epochs: 1, Batch: 4, Optimizer: "sgd", LR: 0.05, Momentum: 0.9, WD: 5e-4}
	env := methodtest.PromptEnv(t, 2, 3, opts)
	ct := &env.Task.Clients[0]
	set := &protocol.EvalSet{Name: "local", Space: 0, Labels: ct.Labels}
	for _, item := range ct.Train {
		set.Images = append(set.Images, len(env.Task.Test))
		env.TestRecs[len(env.Task.Test)] = env.TrainRecs[item][0]
		env.Task.Test = append(env.Task.Test, env.Task.Train[item])
	}
	ct.Evals = []*protocol.EvalSet{set}
	var got []float32
	ctx := methods.WithObserver(context.Background(), &methods.Observer{
		OnEvaluate: func(_ *protocol.ClientTask, logits [][]float32) { got = slices.Clone(logits[0]) }})
	s := fromConfig(DefaultConfig())
	s.NCtx, s.GateWidth, s.GateHeads, s.NumExperts = 2, 3, 1, 3
	plan := methodtest.Build(t, Method{}, env, s)
	methodtest.Round(t, plan, 0, []int{0, 1, 2})
	methodtest.Round(t, plan, 1, []int{0, 1, 2})
	if _, err := plan.Clients[0].Evaluate(ctx, federation.EvaluateIns{}); err != nil {
		t.Fatal(err)
	}
	site, err := plan.Site(0)
	if err != nil {
		t.Fatal(err)
	}
	own, experts, err := strategy.SplitExperts(site)
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(env.Model, env.SpaceTokenRows[0], s.config(env.Seed))
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range l.Params() {
		copy(p.Data, own[name].Data)
	}
	var ctxs [][]float32
	for _, e := range experts {
		ctxs = append(ctxs, e[ParamCtx].Data)
	}
	if len(ctxs) != 2 {
		t.Fatalf("the site keeps %d experts, want 2", len(ctxs))
	}
	if err := l.SetExperts(ctxs); err != nil {
		t.Fatal(err)
	}
	N := len(set.Images)
	feats := make([]float32, N*l.E)
	var recs []int
	for _, img := range set.Images {
		recs = append(recs, env.TestRecs[img])
	}
	if err := env.TestStore.GetBatch(recs, feats); err != nil {
		t.Fatal(err)
	}
	want, err := l.Logits(feats, N)
	if err != nil {
		t.Fatal(err)
	}
	methodtest.SameLogits(t, got, want)
}
