// Package robust wraps a federation.Strategy with robust aggregation of the
// shared tensors and differential privacy. Everything is off by default: a
// Strategy wrapped with zero Options behaves exactly like the inner one.
//
// All transformations work on updates: the difference between what a site
// uploads and what it received in Configure for the same name (zero when it
// received nothing under that name).
//
//   - ClipNorm > 0 scales each site's update (all its shared tensors
//     together) down to L2 norm ClipNorm. On its own it composes with any
//     strategy: the inner strategy receives every result, clipped.
//   - Rule Median or TrimmedMean replaces the average by the coordinate-wise
//     median or trimmed mean of the updates.
//   - DP (Gaussian mechanism) clips each update to DP.Clip, sums them, adds
//     N(0, (σ·Clip)²) to every coordinate and divides by the number of
//     participants; the (ε, δ) spent so far is computed with the Rényi-DP
//     accountant of the Gaussian mechanism (no subsampling amplification,
//     so the bound is conservative) and reported after each round. Noise is
//     drawn from a generator seeded with (Seed, round): reproducible, and
//     a resumed run draws the same noise.
//
// With Median, TrimmedMean or DP the wrapper computes the new shared tensors
// itself (received base + aggregated update) and hands the inner strategy a
// single synthetic result holding them, with the participants' total
// example count and the ID of the first participant; every participant must
// have received the same shared tensors. This is exact for FedAvg and
// UniformMean (the mean of one result is that result). Strategies that keep
// per-client tensors (Relay, KNNPool: they implement PerClient) would see
// one synthetic participant: Wrap refuses them with Median, TrimmedMean or
// DP; ClipNorm alone composes with them.
//
// [FromConfig] builds the wrapper from the configuration's aggregation
// section (config.Aggregation), for `pfedmma run` and `pfedmma serve`
// alike; the arithmetic (clipping, the rules, the accountant) is in
// aggregate.go.
package robust

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/tensor"
)

// Rule is the aggregation rule of the shared updates.
type Rule int

const (
	// Mean leaves the averaging to the inner strategy.
	Mean Rule = iota
	// Median takes the coordinate-wise median of the updates.
	Median
	// TrimmedMean drops the Trim fraction of the smallest and of the
	// largest values of each coordinate and averages the rest.
	TrimmedMean
)

// Options configure the wrapper; the zero value changes nothing.
type Options struct {
	// Shared selects the tensors transformed (nil: every uploaded tensor).
	Shared federation.Filter
	Rule   Rule
	// Trim is TrimmedMean's fraction cut at each end, in [0, 0.5).
	Trim float64
	// ClipNorm, when positive, bounds the L2 norm of each site's update.
	ClipNorm float64
	// DP, when set, adds the Gaussian mechanism.
	DP *DP
	// Logger receives one line per round with DP's ε (nil: slog.Default()).
	Logger *slog.Logger
}

// DP configures the Gaussian mechanism on the shared updates.
type DP struct {
	// Clip is the per-site L2 bound C of an update.
	Clip float64
	// NoiseMultiplier σ: the noise added to the sum has std σ·C.
	NoiseMultiplier float64
	// Delta is the δ at which ε is reported.
	Delta float64
	// Seed seeds the noise (with the round).
	Seed uint64
}

// PerClient is a strategy that keeps tensors per client (a pool of every
// client's prompt, relayed tensors). Robust aggregation and DP hand the
// inner strategy one synthetic result, which would collapse its per-client
// tensors to one entry: Wrap refuses such a strategy unless only ClipNorm
// is asked for.
type PerClient interface {
	PerClient() bool
}

// NoisyMean is a strategy whose aggregation is itself a differential
// privacy mechanism: the mean of the uploads plus noise calibrated to it
// (DP-FPL's global prompt). A median, a trimmed mean or a second DP mean in
// its place would void its accounting: Wrap refuses them.
type NoisyMean interface {
	NoisyMean() bool
}

// Strategy is a wrapped strategy. Make it with Wrap.
type Strategy struct {
	inner    federation.Strategy
	opts     Options
	sent     map[int]tensor.Named
	dpRounds int
	epsilon  float64
}

// Wrap checks opts and wraps inner.
func Wrap(inner federation.Strategy, opts Options) (*Strategy, error) {
	if inner == nil {
		return nil, errors.New("robust: no inner strategy")
	}
	if opts.Rule < Mean || opts.Rule > TrimmedMean {
		return nil, fmt.Errorf("robust: unknown rule %d", opts.Rule)
	}
	if !(opts.Trim >= 0 && opts.Trim < 0.5) || (opts.Trim > 0 && opts.Rule != TrimmedMean) {
		return nil, fmt.Errorf("robust: trim %g must be in [0, 0.5) and only with the trimmed mean", opts.Trim)
	}
	if opts.ClipNorm < 0 || math.IsNaN(opts.ClipNorm) {
		return nil, fmt.Errorf("robust: clip norm %g", opts.ClipNorm)
	}
	if d := opts.DP; d != nil {
		if !(d.Clip > 0) || !(d.NoiseMultiplier > 0) || math.IsInf(d.Clip, 0) || math.IsInf(d.NoiseMultiplier, 0) || !(d.Delta > 0 && d.Delta < 1) {
			return nil, fmt.Errorf("robust: DP needs clip > 0, noise multiplier > 0 and δ in (0, 1); got %g, %g, %g", d.Clip, d.NoiseMultiplier, d.Delta)
		}
		if opts.Rule != Mean {
			return nil, errors.New("robust: DP's accounting holds for the clipped mean only; use Rule Mean with DP")
		}
	}
	if pc, ok := inner.(PerClient); ok && pc.PerClient() && (opts.Rule != Mean || opts.DP != nil) {
		what := map[Rule]string{Median: "a median", TrimmedMean: "a trimmed mean", Mean: "differential privacy's noisy mean"}[opts.Rule]
		return nil, fmt.Errorf("robust: strategy %q keeps each client's own tensors (a pool of prompts, relayed tensors) and cannot take %s of the uploads, which would collapse them to one entry; use the method's own aggregation (aggregation.rule: mean, serve's --aggregate mean), with aggregation.clip_norm if wanted", inner.Name(), what)
	}
	if nm, ok := inner.(NoisyMean); ok && nm.NoisyMean() && (opts.Rule != Mean || opts.DP != nil) {
		what := map[Rule]string{Median: "a median", TrimmedMean: "a trimmed mean", Mean: "differential privacy's noisy mean"}[opts.Rule]
		return nil, fmt.Errorf("robust: strategy %q adds its own differential-privacy noise to the mean of the uploads (its accounting holds for that mean only) and cannot take %s instead; use the method's own aggregation (aggregation.rule: mean and aggregation.dp off; serve's --aggregate mean)", inner.Name(), what)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Strategy{inner: inner, opts: opts}, nil
}

// Name is the inner strategy's name with the options, e.g.
// "fedavg+median+clip(1)+dp(σ=1.1,C=1)".
func (s *Strategy) Name() string {
	n := s.inner.Name()
	switch s.opts.Rule {
	case Median:
		n += "+median"
	case TrimmedMean:
		n += fmt.Sprintf("+trimmed(%g)", s.opts.Trim)
	}
	if s.opts.ClipNorm > 0 {
		n += fmt.Sprintf("+clip(%g)", s.opts.ClipNorm)
	}
	if d := s.opts.DP; d != nil {
		n += fmt.Sprintf("+dp(σ=%g,C=%g)", d.NoiseMultiplier, d.Clip)
	}
	return n
}

// Init implements federation.Strategy.
func (s *Strategy) Init(clients []federation.ClientInfo) error {
	s.sent, s.dpRounds, s.epsilon = map[int]tensor.Named{}, 0, 0
	return s.inner.Init(clients)
}

// Configure implements federation.Strategy and remembers what each site
// received, the base of its update.
func (s *Strategy) Configure(round int, selected []int) (map[int]tensor.Named, error) {
	out, err := s.inner.Configure(round, selected)
	if err != nil {
		return nil, err
	}
	s.sent = make(map[int]tensor.Named, len(out))
	for id, n := range out {
		s.sent[id] = n.Clone()
	}
	return out, nil
}

// ConfigureEvaluate implements federation.EvaluateConfigurer: the inner
// strategy's evaluation instructions (its global after this round's robust
// aggregate).
func (s *Strategy) ConfigureEvaluate(round int, clients []int) (map[int]tensor.Named, error) {
	return federation.ConfigureEvaluate(s.inner, round, clients)
}

// Epsilon returns the ε spent after the DP rounds so far at DP.Delta (0
// without DP).
func (s *Strategy) Epsilon() float64 { return s.epsilon }

// EpsilonMetric is the key of the ε spent so far in a round's metrics
// (metrics.jsonl's mean, summary.json).
const EpsilonMetric = "dp_epsilon"

// RoundMetrics implements federation.RoundReporter: with DP, the ε spent
// after the rounds aggregated so far (EpsilonMetric); nil without.
func (s *Strategy) RoundMetrics() federation.Metrics {
	if s.opts.DP == nil {
		return nil
	}
	return federation.Metrics{EpsilonMetric: s.epsilon}
}

// Aggregate implements federation.Strategy (see the package comment).
func (s *Strategy) Aggregate(round int, results []federation.FitResult, failures []federation.Failure) error {
	o := s.opts
	if len(results) == 0 || (o.Rule == Mean && o.ClipNorm == 0 && o.DP == nil) {
		return s.inner.Aggregate(round, results, failures)
	}
	names := s.sharedNames(results)
	deltas, err := s.clippedDeltas(results, names)
	if err != nil {
		return fmt.Errorf("robust round %d: %w", round, err)
	}
	if o.Rule == Mean && o.DP == nil {
		out := make([]federation.FitResult, len(results))
		for i, r := range results {
			out[i] = r
			out[i].Params = r.Params.Clone()
			for _, name := range names {
				out[i].Params[name] = add(s.base(r.ClientID, name, r.Params[name].Shape), deltas[i][name])
			}
		}
		return s.inner.Aggregate(round, out, failures)
	}
	base := results[0].ClientID
	agg := tensor.Named{}
	total := 0
	for _, r := range results {
		total += r.NumExamples
	}
	var rng *rand.Rand
	if o.DP != nil {
		rng = rand.New(rand.NewPCG(o.DP.Seed, uint64(round)))
	}
	for _, name := range names {
		b := s.base(base, name, results[0].Params[name].Shape)
		for _, r := range results[1:] {
			if !slices.Equal(s.base(r.ClientID, name, b.Shape).Data, b.Data) {
				return fmt.Errorf("robust round %d: sites %d and %d received different %q; robust aggregation needs one shared base", round, base, r.ClientID, name)
			}
		}
		col := make([]float64, len(deltas))
		out := tensor.New(b.Shape...)
		for j := range out.Data {
			for i, d := range deltas {
				col[i] = float64(d[name].Data[j])
			}
			out.Data[j] = float32(float64(b.Data[j]) + o.combine(col, rng))
		}
		agg[name] = out
	}
	if o.DP != nil {
		s.dpRounds++
		s.epsilon = Epsilon(s.dpRounds, o.DP.NoiseMultiplier, o.DP.Delta)
		o.Logger.Info("differential privacy", "round", round, "epsilon", s.epsilon, "delta", o.DP.Delta,
			"noise_multiplier", o.DP.NoiseMultiplier, "clip", o.DP.Clip, "participants", len(results))
	}
	syn := federation.FitResult{ClientID: base, NumExamples: total, Params: agg, Metrics: results[0].Metrics}
	return s.inner.Aggregate(round, []federation.FitResult{syn}, failures)
}

// clippedDeltas is each result's update on the shared tensors names,
// clipped to the configured norm (DP's clip under differential privacy).
func (s *Strategy) clippedDeltas(results []federation.FitResult, names []string) ([]tensor.Named, error) {
	o := s.opts
	deltas := make([]tensor.Named, len(results))
	for i, r := range results {
		d, err := s.delta(r, names)
		if err != nil {
			return nil, err
		}
		deltas[i] = d
	}
	clip := o.ClipNorm
	if o.DP != nil {
		clip = o.DP.Clip
	}
	if clip > 0 {
		for _, d := range deltas {
			ClipUpdate(d, clip)
		}
	}
	return deltas, nil
}

// combine is the rule's value of one coordinate from the sites' updates
// col: their median, trimmed mean, or mean (with DP's Gaussian noise on
// the sum, drawn from rng).
func (o Options) combine(col []float64, rng *rand.Rand) float64 {
	var v float64
	switch o.Rule {
	case Median:
		v = MedianOf(col)
	case TrimmedMean:
		v = TrimmedMeanOf(col, o.Trim)
	default:
		for _, x := range col {
			v += x
		}
		if o.DP != nil {
			v += rng.NormFloat64() * o.DP.NoiseMultiplier * o.DP.Clip
		}
		v /= float64(len(col))
	}
	return v
}

func (s *Strategy) sharedNames(results []federation.FitResult) []string {
	set := map[string]bool{}
	for _, r := range results {
		for k := range r.Params {
			if s.opts.Shared.Match(k) {
				set[k] = true
			}
		}
	}
	names := make([]string, 0, len(set))
	for k := range set {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// base is what site id received under name (zeros of shape when nothing).
func (s *Strategy) base(id int, name string, shape []int) *tensor.Tensor {
	if t := s.sent[id][name]; t != nil && slices.Equal(t.Shape, shape) {
		return t
	}
	return tensor.New(shape...)
}

func (s *Strategy) delta(r federation.FitResult, names []string) (tensor.Named, error) {
	d := tensor.Named{}
	for _, name := range names {
		t := r.Params[name]
		if t == nil {
			return nil, fmt.Errorf("site %d did not upload %q", r.ClientID, name)
		}
		if tensor.Numel(t.Shape) != len(t.Data) {
			return nil, fmt.Errorf("site %d: %q: shape does not match data", r.ClientID, name)
		}
		b := s.base(r.ClientID, name, t.Shape)
		out := tensor.New(t.Shape...)
		for j, v := range t.Data {
			out.Data[j] = v - b.Data[j]
		}
		d[name] = out
	}
	return d, nil
}

// State implements federation.Strategy: the inner state plus
// "robust/dp_rounds".
func (s *Strategy) State() tensor.Named {
	st := s.inner.State()
	if s.opts.DP != nil {
		st["robust/dp_rounds"] = &tensor.Tensor{Shape: []int{1}, Data: []float32{float32(s.dpRounds)}}
	}
	return st
}

// LoadState implements federation.Strategy.
func (s *Strategy) LoadState(st tensor.Named) error {
	inner := tensor.Named{}
	for k, v := range st {
		if k == "robust/dp_rounds" {
			if len(v.Data) != 1 || v.Data[0] < 0 {
				return fmt.Errorf("robust load state: bad %q", k)
			}
			s.dpRounds = int(v.Data[0])
			if s.opts.DP != nil {
				s.epsilon = Epsilon(s.dpRounds, s.opts.DP.NoiseMultiplier, s.opts.DP.Delta)
			}
			continue
		}
		inner[k] = v
	}
	return s.inner.LoadState(inner)
}
