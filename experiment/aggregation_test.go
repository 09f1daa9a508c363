package experiment

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/robust"
	"github.com/pfedmma/pfedmma/runfiles"
)

// TestRunAggregation: `pfedmma run` builds its strategy through the
// configuration's aggregation section — a median gives other global
// tensors than the method's mean, DP reports the accountant's ε after
// every evaluated round in metrics.jsonl and in summary.json, and a
// strategy that keeps each client's tensors with a median is refused
// before any round of any method, naming the key.
func TestRunAggregation(t *testing.T) {
	model := smallModel(t)
	base := func(a config.Aggregation) Options {
		o := smallOptions(t, model)
		o.Methods, o.Rounds, o.EvalEvery = []string{PFedMMA}, 2, 1
		o.Protocol.Clients = 3
		o.Aggregation = a
		return o
	}
	global := func(o Options) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(o.OutDir, runfiles.GlobalFile(PFedMMA)))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	off := config.Default().Aggregation
	mean := base(off)
	if _, err := Run(context.Background(), mean); err != nil {
		t.Fatal(err)
	}
	med := off
	med.Rule = config.RuleMedian
	om := base(med)
	if _, err := Run(context.Background(), om); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(global(mean), global(om)) {
		t.Error("aggregation.rule median left the global tensors of the mean")
	}

	dp := off
	dp.DP = config.DP{NoiseMultiplier: 0.8, Clip: 0.5, Delta: 1e-5}
	od := base(dp)
	res, err := Run(context.Background(), od)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 2 {
		t.Fatalf("%d records, want 2", len(res.Records))
	}
	for _, r := range res.Records {
		want := robust.Epsilon(r.Round+1, 0.8, 1e-5)
		if got, ok := r.Mean[robust.EpsilonMetric]; !ok || got != want {
			t.Errorf("round %d: %s = %v (present %v), want %v", r.Round, robust.EpsilonMetric, got, ok, want)
		}
	}
	jl, err := os.ReadFile(filepath.Join(od.OutDir, "metrics.jsonl"))
	if err != nil || strings.Count(string(jl), `"`+robust.EpsilonMetric+`"`) != 2 {
		t.Errorf("metrics.jsonl does not hold ε per round (%v):\n%s", err, jl)
	}
	raw, err := os.ReadFile(filepath.Join(od.OutDir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		DP map[string]map[string]float64 `json:"dp"`
	}
	if err := json.Unmarshal(raw, &sum); err != nil {
		t.Fatal(err)
	}
	if s := sum.DP[PFedMMA]; s["epsilon"] != robust.Epsilon(2, 0.8, 1e-5) || s["delta"] != 1e-5 || s["noise_multiplier"] != 0.8 || s["clip"] != 0.5 {
		t.Errorf("summary.json dp: %v\n%s", sum.DP, raw)
	}
	if bytes.Equal(global(mean), global(od)) {
		t.Error("DP left the global tensors of the mean")
	}
	// without DP there is no ε anywhere
	if raw, _ := os.ReadFile(filepath.Join(om.OutDir, "summary.json")); bytes.Contains(raw, []byte(`"dp"`)) {
		t.Errorf("summary.json of a median run reports DP:\n%s", raw)
	}

	// pFedMoAP's pool keeps every client's prompt: no median of it
	e := config.Default()
	if err := e.Set("pfedmoap", "{num_experts: 2, n_ctx: 4, gate_width: 16}"); err != nil {
		t.Fatal(err)
	}
	// listed after pFedMMA: refused before pFedMMA trains
	op := base(med)
	op.Methods = []string{PFedMMA, "pfedmoap"}
	op.Sections = map[string]config.Section{PFedMMA: op.Sections[PFedMMA], "pfedmoap": e.Sections["pfedmoap"]}
	rounds := 0
	op.OnRound = func(string, federation.RoundReport) { rounds++ }
	_, err = Run(context.Background(), op)
	if err == nil || rounds > 0 || !strings.Contains(err.Error(), "aggregation.rule: ") || !strings.Contains(err.Error(), "keeps each client's own tensors") {
		t.Errorf("pfedmoap with a median: %v after %d rounds, want a refusal naming aggregation.rule before any round", err, rounds)
	}
}

// TestDPResumeEqualsUninterrupted: a DP run stopped after round 1 and
// resumed draws the same noise and reports the same ε per round as the
// uninterrupted run: the global tensors are bit-identical.
func TestDPResumeEqualsUninterrupted(t *testing.T) {
	model := smallModel(t)
	mk := func() Options {
		o := smallOptions(t, model)
		o.Methods, o.EvalEvery = []string{PFedMMA}, 1
		o.Aggregation = config.Default().Aggregation
		o.Aggregation.DP = config.DP{NoiseMultiplier: 1.2, Clip: 0.1, Delta: 1e-5}
		return o
	}
	full := mk()
	want, err := Run(context.Background(), full)
	if err != nil {
		t.Fatal(err)
	}
	part := mk()
	ctx, cancel := context.WithCancel(context.Background())
	part.OnRound = func(_ string, r federation.RoundReport) {
		if r.Round == 1 {
			cancel()
		}
	}
	if _, err := Run(ctx, part); err == nil {
		t.Fatal("the run did not stop after round 1")
	}
	part.OnRound, part.Resume = nil, true
	got, err := Run(context.Background(), part)
	if err != nil {
		t.Fatal(err)
	}
	a, err1 := os.ReadFile(filepath.Join(full.OutDir, runfiles.GlobalFile(PFedMMA)))
	b, err2 := os.ReadFile(filepath.Join(part.OutDir, runfiles.GlobalFile(PFedMMA)))
	if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
		t.Fatalf("the resumed DP run's global tensors differ from the uninterrupted run's (%v, %v)", err1, err2)
	}
	if len(got.Records) != len(want.Records) || len(want.Records) != full.Rounds {
		t.Fatalf("%d records resumed, %d uninterrupted", len(got.Records), len(want.Records))
	}
	for i, w := range want.Records {
		if e := got.Records[i].Mean[robust.EpsilonMetric]; e != w.Mean[robust.EpsilonMetric] || e != robust.Epsilon(w.Round+1, 1.2, 1e-5) {
			t.Errorf("round %d: ε %v resumed, %v uninterrupted", w.Round, e, w.Mean[robust.EpsilonMetric])
		}
	}
}

// TestAggregationPrecheckChangesNothing: building every method's plan
// before any trains (the aggregation check of a run comparing several
// methods) leaves each method's results as they are: promptfl after
// pFedMMA ends bit-identical to promptfl alone.
func TestAggregationPrecheckChangesNothing(t *testing.T) {
	model := smallModel(t)
	mk := func(ms ...string) Options {
		o := smallOptions(t, model)
		o.Methods, o.Rounds = ms, 2
		o.Sections = mmaSections(2, 8, 0.1)
		o.Sections["promptfl"] = promptSections(4)["promptfl"]
		o.Aggregation = config.Default().Aggregation
		o.Aggregation.ClipNorm = 0.01
		return o
	}
	alone, both := mk("promptfl"), mk(PFedMMA, "promptfl")
	for _, o := range []Options{alone, both} {
		if _, err := Run(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	a, err1 := os.ReadFile(filepath.Join(alone.OutDir, runfiles.GlobalFile("promptfl")))
	b, err2 := os.ReadFile(filepath.Join(both.OutDir, runfiles.GlobalFile("promptfl")))
	if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
		t.Errorf("promptfl's global differs after pFedMMA with the aggregation check (%v, %v)", err1, err2)
	}
}
