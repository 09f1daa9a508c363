package robust

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/strategy"
)

// TestFromConfig: the aggregation section off leaves the strategy as it
// is; each setting maps onto the wrapper's options (dp.seed 0 is the run's
// seed); a per-client strategy with a rule or DP is refused naming the key.
func TestFromConfig(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	off := config.Default().Aggregation
	inner := fedavg([]float32{0})
	if s, err := FromConfig(inner, off, 1, quiet); err != nil || s != federation.Strategy(inner) {
		t.Fatalf("aggregation off: %v, %v (want the inner strategy itself)", s, err)
	}
	for _, c := range []struct {
		a    config.Aggregation
		want Options
		name string
	}{
		{config.Aggregation{Rule: config.RuleMedian}, Options{Rule: Median}, "fedavg+median"},
		{config.Aggregation{Rule: config.RuleTrimmedMean, Trim: 0.25, ClipNorm: 2}, Options{Rule: TrimmedMean, Trim: 0.25, ClipNorm: 2}, "fedavg+trimmed(0.25)+clip(2)"},
		{config.Aggregation{Rule: config.RuleMean, ClipNorm: 0.5}, Options{ClipNorm: 0.5}, "fedavg+clip(0.5)"},
		{config.Aggregation{Rule: config.RuleMean, DP: config.DP{NoiseMultiplier: 1.1, Clip: 0.3, Delta: 1e-6}}, Options{DP: &DP{Clip: 0.3, NoiseMultiplier: 1.1, Delta: 1e-6, Seed: 7}}, "fedavg+dp(σ=1.1,C=0.3)"},
		{config.Aggregation{Rule: config.RuleMean, DP: config.DP{NoiseMultiplier: 2, Clip: 1, Delta: 1e-5, Seed: 3}}, Options{DP: &DP{Clip: 1, NoiseMultiplier: 2, Delta: 1e-5, Seed: 3}}, "fedavg+dp(σ=2,C=1)"},
	} {
		s, err := FromConfig(fedavg([]float32{0}), c.a, 7, quiet)
		if err != nil {
			t.Fatalf("%+v: %v", c.a, err)
		}
		w, ok := s.(*Strategy)
		if !ok || w.Name() != c.name {
			t.Fatalf("%+v: %T %q, want %q", c.a, s, s.Name(), c.name)
		}
		o := w.opts
		if o.Rule != c.want.Rule || o.Trim != c.want.Trim || o.ClipNorm != c.want.ClipNorm || (o.DP == nil) != (c.want.DP == nil) || (o.DP != nil && *o.DP != *c.want.DP) {
			t.Errorf("%+v: options %+v (dp %+v), want %+v (dp %+v)", c.a, o, o.DP, c.want, c.want.DP)
		}
	}
	pool := &strategy.KNNPool{Shared: federation.Names("ctx"), K: 1}
	for key, a := range map[string]config.Aggregation{
		"aggregation.rule":                {Rule: config.RuleMedian},
		"aggregation.dp.noise_multiplier": {Rule: config.RuleMean, DP: config.DP{NoiseMultiplier: 1, Clip: 1, Delta: 1e-5}},
	} {
		_, err := FromConfig(pool, a, 1, quiet)
		if err == nil || !strings.HasPrefix(err.Error(), key+": ") || !strings.Contains(err.Error(), "keeps each client's own tensors") {
			t.Errorf("pool with %s: %v", key, err)
		}
	}
	if _, err := FromConfig(pool, config.Aggregation{Rule: config.RuleMean, ClipNorm: 1}, 1, quiet); err != nil {
		t.Errorf("pool with clip_norm alone: %v", err)
	}
}

// TestRoundMetrics: with DP the wrapper reports the ε spent after each
// aggregated round (the accountant's), none without.
func TestRoundMetrics(t *testing.T) {
	ups := [][]float32{{1, 2}, {3, -4}}
	_, s := run(t, Options{DP: &DP{Clip: 1, NoiseMultiplier: 1.5, Delta: 1e-5, Seed: 2}}, []float32{0, 0}, ups, []int{1, 1})
	var rr federation.RoundReporter = s
	m := rr.RoundMetrics()
	if want := Epsilon(1, 1.5, 1e-5); len(m) != 1 || m[EpsilonMetric] != want || want <= 0 {
		t.Errorf("after one DP round: %v, want %s = %v", m, EpsilonMetric, want)
	}
	_, s = run(t, Options{Rule: Median}, []float32{0, 0}, ups, []int{1, 1})
	if m := s.RoundMetrics(); m != nil {
		t.Errorf("without DP: %v", m)
	}
}
