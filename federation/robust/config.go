package robust

import (
	"fmt"
	"log/slog"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
)

// FromConfig wraps inner as the configuration's aggregation section asks
// (config.Aggregation: rule, trim, clip_norm, dp) and returns inner itself
// when the section is off. `pfedmma run` and `pfedmma serve` both build
// their strategy through it, so a simulation reproduces a hardened
// deployment. seed is the run's seed, the noise's when dp.seed is 0;
// logger receives DP's ε per round (nil: slog.Default()). A combination
// that cannot work (a median of a strategy that keeps each client's
// tensors) is refused before any round, naming the key.
func FromConfig(inner federation.Strategy, a config.Aggregation, seed uint64, logger *slog.Logger) (federation.Strategy, error) {
	if !a.Active() {
		return inner, nil
	}
	opts, key, err := Settings(a, seed)
	if err != nil {
		return nil, err
	}
	opts.Logger = logger
	s, err := Wrap(inner, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return s, nil
}

// Settings are the wrapper's options for an aggregation section, and the
// key an error of Wrap names: aggregation.dp.noise_multiplier with DP,
// aggregation.rule with a robust rule, aggregation.clip_norm otherwise.
func Settings(a config.Aggregation, seed uint64) (Options, string, error) {
	opts := Options{Trim: a.Trim, ClipNorm: a.ClipNorm}
	key := "aggregation.clip_norm"
	switch a.Rule {
	case config.RuleMean, "":
	case config.RuleMedian:
		opts.Rule, key = Median, "aggregation.rule"
	case config.RuleTrimmedMean:
		opts.Rule, key = TrimmedMean, "aggregation.rule"
	default:
		return Options{}, "", fmt.Errorf("aggregation.rule: %q: want %s, %s or %s", a.Rule, config.RuleMean, config.RuleMedian, config.RuleTrimmedMean)
	}
	if a.DP.On() {
		dseed := a.DP.Seed
		if dseed == 0 {
			dseed = seed
		}
		opts.DP = &DP{Clip: a.DP.Clip, NoiseMultiplier: a.DP.NoiseMultiplier, Delta: a.DP.Delta, Seed: dseed}
		key = "aggregation.dp.noise_multiplier"
	}
	return opts, key, nil
}
