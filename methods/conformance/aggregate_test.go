package conformance

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/robust"
	"github.com/pfedmma/pfedmma/tensor"
)

// recorder keeps every upload by round and client.
type recorder struct {
	federation.Client
	mu  *sync.Mutex
	ups map[int]map[int]tensor.Named
}

func (r recorder) Fit(ctx context.Context, ins federation.FitIns) (federation.FitRes, error) {
	res, err := r.Client.Fit(ctx, ins)
	if err == nil {
		r.mu.Lock()
		if r.ups[ins.Round] == nil {
			r.ups[ins.Round] = map[int]tensor.Named{}
		}
		r.ups[ins.Round][r.ID()] = res.Params.Clone()
		r.mu.Unlock()
	}
	return res, err
}

func globals(st tensor.Named) tensor.Named {
	out := tensor.Named{}
	for k, v := range st {
		if name, ok := strings.CutPrefix(k, "global/"); ok {
			out[name] = v.Clone()
		}
	}
	return out
}

// TestAggregationRules: each method configured with `aggregation.rule:
// median`, `trimmed_mean`, a median of updates clipped by
// `aggregation.clip_norm`, and `aggregation.dp` — the configuration
// `pfedmma run` and `pfedmma serve` read — either is refused when the
// federation is prepared, before any round, by an error naming the key and
// the rule, or runs two rounds in which the strategy's new global tensors
// are exactly the received ones plus the rule (federation/robust's
// arithmetic) applied to the participants' updates: the coordinate-wise
// median, the trimmed mean, or the clipped mean plus the Gaussian noise
// drawn from (seed, round), of the configured scale; and `pfedmma run` of
// the same configuration gives those results bit for bit, with DP's ε
// after every round.
func TestAggregationRules(t *testing.T) {
	skipPureGo(t)
	rules := []struct {
		name, key, word string
		sets            []string
	}{
		{"median", "aggregation.rule", "median", []string{"aggregation.rule=median"}},
		{"trimmed_mean", "aggregation.rule", "trimmed mean", []string{"aggregation.rule=trimmed_mean", "aggregation.trim=0.34"}},
		{"clip_norm", "aggregation.rule", "median", []string{"aggregation.rule=median", "aggregation.clip_norm=0.0001"}},
		{"dp", "aggregation.dp.noise_multiplier", "differential privacy", []string{"aggregation.dp.noise_multiplier=0.5", "aggregation.dp.clip=0.0001", "aggregation.dp.seed=9"}},
	}
	forEach(t, func(t *testing.T, name string) {
		for _, rule := range rules {
			e := worldConfig(t, name, append([]string{"federation.rounds=2", "federation.fraction=1"}, rule.sets...)...)
			o := options(t, e, t.TempDir())
			c, err := experiment.PrepareFederated(context.Background(), o, -1)
			if err != nil {
				if !strings.Contains(err.Error(), rule.key+": ") || !strings.Contains(err.Error(), rule.word) {
					t.Errorf("%s refused without naming the key %s and the rule (%q): %v", rule.name, rule.key, rule.word, err)
				}
				t.Logf("%s: refused: %v", rule.name, err)
				continue
			}
			c.Close()
			opts, _, err := robust.Settings(e.Aggregation, o.Seed)
			if err != nil {
				t.Fatal(err)
			}
			f := newFederated(t, o, name)
			st := f.coord.Plan.Strategy
			if _, ok := st.(*robust.Strategy); !ok {
				t.Fatalf("%s: the configured strategy %T is not the robust wrapper", rule.name, st)
			}
			co := f.coordinator()
			var mu sync.Mutex
			ups := map[int]map[int]tensor.Named{}
			for i := range numClients {
				co.Proxies = append(co.Proxies, federation.NewSite(recorder{Client: f.sites[i].Client(i), mu: &mu, ups: ups}, f.dirs[i]))
			}
			before := map[int]tensor.Named{}
			after := map[int]tensor.Named{}
			co.FitConfig = func(round int) map[string]string {
				before[round] = globals(st.State())
				return nil
			}
			co.OnRound = func(rep federation.RoundReport) error {
				after[rep.Round] = globals(st.State())
				return nil
			}
			hist, err := co.Run(context.Background())
			if err != nil {
				t.Fatalf("%s: %v", rule.name, err)
			}
			clipped := 0
			for round := range o.Rounds {
				clipped += checkRule(t, fmt.Sprintf("%s round %d", rule.name, round), opts, round, before[round], after[round], ups[round])
			}
			if (opts.ClipNorm > 0 || opts.DP != nil) && clipped == 0 {
				t.Errorf("%s: no update was longer than the clip: the check does not see clipping", rule.name)
			}
			// `pfedmma run` of the same configuration gives the same
			// results, bit for bit, and DP's ε after every round
			res, err := simulate(t, o, -1, nil)
			if err != nil {
				t.Fatalf("%s: run: %v", rule.name, err)
			}
			compare(t, rule.name+": run vs the federation", simOutcome(t, o, name, res), f.outcome(hist))
			for _, r := range res.Records {
				eps, ok := r.Mean[robust.EpsilonMetric]
				if opts.DP != nil && (!ok || eps != robust.Epsilon(r.Round+1, opts.DP.NoiseMultiplier, opts.DP.Delta)) {
					t.Errorf("%s: round %d: %s = %v (reported %v)", rule.name, r.Round, robust.EpsilonMetric, eps, ok)
				}
				if opts.DP == nil && ok {
					t.Errorf("%s: round %d reports %s without DP", rule.name, r.Round, robust.EpsilonMetric)
				}
			}
		}
	})
}

// checkRule checks one round of a robust rule: after = before + rule(upload
// − before) on every global tensor, computed with federation/robust's
// arithmetic on the recorded uploads (clipping over all of a site's
// uploaded tensors, as the wrapper clips). It returns how many updates
// were clipped.
func checkRule(t *testing.T, what string, o robust.Options, round int, before, after tensor.Named, ups map[int]tensor.Named) int {
	t.Helper()
	if len(after) == 0 || len(ups) < 2 {
		t.Fatalf("%s: %d global tensors, %d uploads", what, len(after), len(ups))
	}
	ids := make([]int, 0, len(ups))
	for id := range ups {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	nameSet := map[string]bool{}
	for _, id := range ids {
		for n := range ups[id] {
			nameSet[n] = true
		}
	}
	names := slices.Sorted(maps.Keys(nameSet))
	for n := range after {
		if !nameSet[n] {
			t.Fatalf("%s: no site uploaded global %q", what, n)
		}
	}
	// every site's update, clipped (all its tensors together)
	deltas := map[int]tensor.Named{}
	clipped := 0
	for _, id := range ids {
		d := tensor.Named{}
		for _, n := range names {
			u := ups[id][n]
			if u == nil {
				t.Fatalf("%s: site %d did not upload %q", what, id, n)
			}
			d[n] = &tensor.Tensor{Shape: u.Shape, Data: make([]float32, len(u.Data))}
			b := before[n]
			for j := range u.Data {
				d[n].Data[j] = u.Data[j]
				if b != nil {
					d[n].Data[j] = u.Data[j] - b.Data[j]
				}
			}
		}
		clip := o.ClipNorm
		if o.DP != nil {
			clip = o.DP.Clip
		}
		if clip > 0 {
			var ss float64
			for _, v := range d {
				for _, x := range v.Data {
					ss += float64(x) * float64(x)
				}
			}
			if math.Sqrt(ss) > clip {
				clipped++
			}
			robust.ClipUpdate(d, clip)
		}
		deltas[id] = d
	}
	var rng *rand.Rand
	if o.DP != nil {
		rng = rand.New(rand.NewPCG(o.DP.Seed, uint64(round)))
	}
	var noise []float64
	for _, n := range names {
		b, a := before[n], after[n]
		for j := range deltas[ids[0]][n].Data {
			col := make([]float64, len(ids))
			for i, id := range ids {
				col[i] = float64(deltas[id][n].Data[j])
			}
			var v, z float64
			switch {
			case o.DP != nil:
				for _, x := range col {
					v += x
				}
				z = rng.NormFloat64() * o.DP.NoiseMultiplier * o.DP.Clip
				v = (v + z) / float64(len(col))
			case o.Rule == robust.Median:
				v = robust.MedianOf(col)
			case o.Rule == robust.TrimmedMean:
				v = robust.TrimmedMeanOf(col, o.Trim)
			}
			if a == nil {
				continue // a shared tensor the strategy keeps no global of
			}
			if b == nil || len(b.Data) != len(a.Data) {
				t.Fatalf("%s: the base lacks global %q", what, n)
			}
			want := float32(float64(b.Data[j]) + v)
			if got := a.Data[j]; math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("%s: %s[%d] = %v, the rule gives %v", what, n, j, got, want)
			}
			noise = append(noise, z/float64(len(col)))
		}
	}
	if o.DP != nil {
		// the noise of the mean: N(0, (σ·C/n)²) per coordinate
		var ss float64
		for _, x := range noise {
			ss += x * x
		}
		sd := math.Sqrt(ss / float64(len(noise)))
		want := o.DP.NoiseMultiplier * o.DP.Clip / float64(len(ids))
		if len(noise) < 50 || sd < 0.7*want || sd > 1.3*want {
			t.Errorf("%s: the noise on %d coordinates has sd %.4g, want σ·C/n = %.4g", what, len(noise), sd, want)
		}
	}
	return clipped
}
