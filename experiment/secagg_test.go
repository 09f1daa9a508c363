package experiment

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/compress"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/runfiles"
	"github.com/pfedmma/pfedmma/safetensors"
)

// TestRunSecureAggregation: `pfedmma run` with secure aggregation ends
// within the quantiser's reach of the plain run (globals within 1e-4 after
// 2 rounds of training on top of a 2^-25 error per aggregation, the same
// accuracies within a point), and a method whose server needs each site's
// tensors (pFedMoAP's pool), or a median, is refused before any round,
// naming federation.secure_aggregation.
func TestRunSecureAggregation(t *testing.T) {
	model := smallModel(t)
	base := func(secure bool) Options {
		o := smallOptions(t, model)
		o.Methods, o.Rounds, o.EvalEvery = []string{PFedMMA}, 2, 1
		o.Protocol.Clients = 3
		o.SecureAggregation = secure
		return o
	}
	global := func(o Options) map[string][]float32 {
		t.Helper()
		f, err := safetensors.Open(filepath.Join(o.OutDir, runfiles.GlobalFile(PFedMMA)))
		if err != nil {
			t.Fatal(err)
		}
		all, err := f.Float32All()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]float32{}
		for k, v := range all {
			out[k] = v.Data
		}
		return out
	}
	plain, secure := base(false), base(true)
	rp, err := Run(context.Background(), plain)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Run(context.Background(), secure)
	if err != nil {
		t.Fatal(err)
	}
	gp, gs := global(plain), global(secure)
	if len(gp) == 0 || len(gp) != len(gs) {
		t.Fatalf("global tensors: %d plain, %d secure", len(gp), len(gs))
	}
	var diff float64
	for k, v := range gp {
		for i := range v {
			diff = max(diff, math.Abs(float64(v[i])-float64(gs[k][i])))
		}
	}
	if diff > 1e-4 {
		t.Errorf("secure aggregation's global differs from the plain run's by %g", diff)
	}
	sameSummaries(t, "secure vs plain", rp, rs, 1)

	e := config.Default()
	if err := e.Set("pfedmoap", "{num_experts: 2, n_ctx: 4, gate_width: 16}"); err != nil {
		t.Fatal(err)
	}
	op := base(true)
	op.Methods = []string{PFedMMA, "pfedmoap"}
	op.Sections = map[string]config.Section{PFedMMA: op.Sections[PFedMMA], "pfedmoap": e.Sections["pfedmoap"]}
	rounds := 0
	op.OnRound = func(string, federation.RoundReport) { rounds++ }
	_, err = Run(context.Background(), op)
	if err == nil || rounds > 0 || !strings.Contains(err.Error(), "federation.secure_aggregation: ") || !strings.Contains(err.Error(), "needs each site's tensors") {
		t.Errorf("pfedmoap with secure aggregation: %v after %d rounds, want a refusal naming federation.secure_aggregation before any round", err, rounds)
	}
	om := base(true)
	om.Aggregation = config.Default().Aggregation
	om.Aggregation.Rule = config.RuleMedian
	if _, err := Run(context.Background(), om); err == nil || !strings.Contains(err.Error(), "aggregation.rule median") {
		t.Errorf("median with secure aggregation: %v, want a refusal naming aggregation.rule", err)
	}
	oc := base(true)
	oc.Aggregation = config.Default().Aggregation
	oc.Aggregation.ClipNorm = 1
	if _, err := Run(context.Background(), oc); err == nil || !strings.Contains(err.Error(), "aggregation.clip_norm") {
		t.Errorf("server clipping with secure aggregation: %v, want a refusal naming aggregation.clip_norm", err)
	}
	ox := base(true)
	ox.Compress = compress.Int8
	if _, err := Run(context.Background(), ox); err == nil || !strings.Contains(err.Error(), "federation.compress") {
		t.Errorf("compression with secure aggregation: %v, want a refusal naming federation.compress", err)
	}
	// the simulation's quantiser is the protocol's default
	if s, ok := secure.Federation().SecureAggregator(nil).(*federation.SimulatedSecure); ok || s != nil {
		t.Error("a secure aggregator for a method that does not train")
	}
}
