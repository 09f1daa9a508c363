package config

import (
	"fmt"
	"strconv"

	"github.com/pfedmma/pfedmma/compress"
)

// Aggregation rules (aggregation.rule).
const (
	// RuleMean leaves the averaging to the method's own strategy.
	RuleMean = "mean"
	// RuleMedian takes the coordinate-wise median of the sites' updates.
	RuleMedian = "median"
	// RuleTrimmedMean drops the aggregation.trim fraction of the smallest
	// and of the largest values of each coordinate and averages the rest.
	RuleTrimmedMean = "trimmed_mean"
)

// Aggregation hardens the server's aggregation of the shared tensors:
// robust rules, clipping and differential privacy, the same in `pfedmma
// run` (simulation) and `pfedmma serve` (whose --aggregate, --trim,
// --clip-norm and --dp-* flags are shorthands for these keys). Everything
// is off by default; when off, the section leaves the configuration's
// fingerprint as it was before the section existed.
//
// All transformations work on updates: what a site uploads minus what it
// received (federation/robust).
type Aggregation struct {
	// Rule is mean (the method's own aggregation, the default), median or
	// trimmed_mean of the sites' updates. median and trimmed_mean replace
	// the method's averaging; a method whose strategy keeps each client's
	// own tensors (a pool of prompts, relayed tensors) refuses them.
	Rule string `yaml:"rule"`

	// Trim in [0, 0.5) is the fraction trimmed_mean cuts at each end of
	// every coordinate (floor(trim × participants) values); only with rule
	// trimmed_mean.
	Trim float64 `yaml:"trim"`

	// ClipNorm ≥ 0, when positive, scales each site's update (all its
	// shared tensors together) down to this L2 norm before the rule; 0 is
	// off.
	ClipNorm float64 `yaml:"clip_norm"`

	// DP adds the Gaussian mechanism.
	DP DP `yaml:"dp"`
}

// DP configures differential privacy of the aggregate (the Gaussian
// mechanism with server-side fixed clipping): each site's update is clipped
// to Clip, the updates are summed, N(0, (noise_multiplier·clip)²) is added
// to every coordinate and the sum divided by the participants. The ε spent
// at Delta (Rényi-DP accountant, no subsampling amplification: a
// conservative bound) is reported per round in metrics.jsonl
// ("dp_epsilon") and in summary.json.
type DP struct {
	// NoiseMultiplier σ ≥ 0; 0 turns differential privacy off.
	NoiseMultiplier float64 `yaml:"noise_multiplier"`

	// Clip C > 0 is the per-site L2 bound of an update (clip_norm must
	// be 0 while DP is on).
	Clip float64 `yaml:"clip"`

	// Delta in (0, 1) is the δ at which ε is reported.
	Delta float64 `yaml:"delta"`

	// Seed seeds the noise, with the round (0: the run's seed); a resumed
	// run draws the same noise.
	Seed uint64 `yaml:"seed"`
}

// On reports whether DP is on.
func (d DP) On() bool { return d.NoiseMultiplier > 0 }

// Active reports whether the section changes the aggregation at all.
func (a Aggregation) Active() bool {
	return (a.Rule != RuleMean && a.Rule != "") || a.ClipNorm > 0 || a.DP.On()
}

// Check implements [Section]: every problem names its key under
// aggregation (the conformance suite reads the documented bounds through
// [Bounds]).
func (a *Aggregation) Check(c *Checker) {
	c.OneOf("rule", a.Rule, RuleMean, RuleMedian, RuleTrimmedMean)
	c.NonNegative("trim", a.Trim)
	c.Below("trim", a.Trim, 0.5)
	if a.Trim > 0 && a.Rule != RuleTrimmedMean {
		c.Fail("trim", "%v is only read by rule: %s (rule is %s)", a.Trim, RuleTrimmedMean, a.Rule)
	}
	c.NonNegative("clip_norm", a.ClipNorm)
	c.NonNegative("dp.noise_multiplier", a.DP.NoiseMultiplier)
	c.Positive("dp.clip", a.DP.Clip)
	c.Positive("dp.delta", a.DP.Delta)
	c.Below("dp.delta", a.DP.Delta, 1)
	if a.DP.On() && a.ClipNorm > 0 {
		c.Fail("clip_norm", "%v is not read while differential privacy is on: dp.clip bounds each update (set clip_norm: 0)", a.ClipNorm)
	}
	if a.DP.On() && a.Rule != RuleMean {
		c.Fail("dp.noise_multiplier", "%v with rule %s: differential privacy's accounting holds for the clipped mean only (set rule: mean)", a.DP.NoiseMultiplier, a.Rule)
	}
}

// fingerprintLines are the "path=value" lines the section adds to the
// fingerprint: only the settings in effect, so that a configuration with
// the section off (whatever dp.clip says) hashes as it did before the
// section existed.
func (a Aggregation) fingerprintLines() []string {
	var out []string
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	if a.Rule != RuleMean && a.Rule != "" {
		out = append(out, "aggregation.rule="+strconv.Quote(a.Rule))
	}
	if a.Rule == RuleTrimmedMean {
		out = append(out, "aggregation.trim="+f(a.Trim))
	}
	if a.ClipNorm > 0 {
		out = append(out, "aggregation.clip_norm="+f(a.ClipNorm))
	}
	if a.DP.On() {
		out = append(out, "aggregation.dp.noise_multiplier="+f(a.DP.NoiseMultiplier),
			"aggregation.dp.clip="+f(a.DP.Clip), "aggregation.dp.delta="+f(a.DP.Delta),
			fmt.Sprintf("aggregation.dp.seed=%d", a.DP.Seed))
	}
	return out
}

// Shorthands are the values of `pfedmma serve`'s shorthand flags for keys
// of the aggregation and federation sections (--aggregate, --trim,
// --clip-norm, --dp-noise-multiplier, --dp-clip, --dp-delta,
// --secure-aggregation, --compress).
type Shorthands struct {
	Aggregate                                string
	Trim, ClipNorm, DPNoise, DPClip, DPDelta float64
	Secure                                   bool
	Compress                                 string
}

// Sets turns the shorthand flags given (changed reports whether a flag was
// given) into the --set overrides they stand for; a flag not given changes
// nothing (the configuration's value stands).
func (r Shorthands) Sets(changed func(flag string) bool) ([]string, error) {
	var sets []string
	if changed("aggregate") {
		rule := map[string]string{"mean": RuleMean, "median": RuleMedian,
			"trimmed-mean": RuleTrimmedMean, RuleTrimmedMean: RuleTrimmedMean}[r.Aggregate]
		if rule == "" {
			return nil, fmt.Errorf("--aggregate %q: want mean, median or trimmed-mean", r.Aggregate)
		}
		sets = append(sets, "aggregation.rule="+rule)
	}
	for _, f := range []struct {
		flag, key string
		v         float64
	}{{"trim", "trim", r.Trim}, {"clip-norm", "clip_norm", r.ClipNorm}, {"dp-noise-multiplier", "dp.noise_multiplier", r.DPNoise},
		{"dp-clip", "dp.clip", r.DPClip}, {"dp-delta", "dp.delta", r.DPDelta}} {
		if changed(f.flag) {
			sets = append(sets, "aggregation."+f.key+"="+strconv.FormatFloat(f.v, 'g', -1, 64))
		}
	}
	if changed("secure-aggregation") {
		sets = append(sets, "federation.secure_aggregation="+strconv.FormatBool(r.Secure))
	}
	if changed("compress") {
		if _, err := compress.Parse(r.Compress); err != nil {
			return nil, fmt.Errorf("--compress %q: want none, fp16 or int8", r.Compress)
		}
		sets = append(sets, "federation.compress="+r.Compress)
	}
	return sets, nil
}
