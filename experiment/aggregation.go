package experiment

import (
	"fmt"
	"maps"

	"github.com/pfedmma/pfedmma/federation/robust"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/report"
	"github.com/pfedmma/pfedmma/session"
)

// checkAggregation builds every method's plan once before any trains when
// the aggregation section is on and the run compares several methods, so
// that a method whose strategy cannot take it (pFedMoAP's pool with a
// median) is refused at start, not after the methods before it trained.
func checkAggregation(o Options, ms []methods.Method, envs map[cacheKey]*methods.Env, keys []cacheKey) error {
	if (!o.Aggregation.Active() && !o.SecureAggregation) || len(ms) < 2 {
		return nil // a single method is refused when its plan is built
	}
	for i, meth := range ms {
		if _, err := session.Build(o.session(meth, envs[keys[i]], o.Methods[i])); err != nil {
			return fmt.Errorf("%s: %w", o.Methods[i], err)
		}
	}
	return nil
}

// addPrivacy records differential privacy's ε after the last round of
// method name (rec, its last record) in the summary's "dp" field, with the
// settings it was spent at.
func addPrivacy(o Options, sum *report.Summary, name string, rec report.RoundRecord) {
	eps, ok := rec.Mean[robust.EpsilonMetric]
	if !ok || !o.Aggregation.DP.On() {
		return
	}
	if sum.Extra == nil {
		sum.Extra = map[string]any{}
	}
	all, _ := sum.Extra["dp"].(map[string]any)
	if all == nil {
		all = map[string]any{}
		sum.Extra["dp"] = all
	}
	d := o.Aggregation.DP
	all[name] = map[string]float64{"epsilon": eps, "delta": d.Delta, "noise_multiplier": d.NoiseMultiplier, "clip": d.Clip, "rounds": float64(rec.Round + 1)}
}

// strategyMetrics adds the strategy's own metrics of a round (DP's ε) to
// a record's mean.
func strategyMetrics(rec *report.RoundRecord, m map[string]float64) {
	if len(m) == 0 {
		return
	}
	if rec.Mean == nil {
		rec.Mean = report.Metrics{}
	}
	maps.Copy(rec.Mean, m)
}
