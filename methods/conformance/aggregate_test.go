package conformance

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

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

// TestAggregationRules: each method under `serve --aggregate median`,
// `--aggregate trimmed-mean` and DP either is refused by robust.Wrap —
// before any round, with the reason naming the rule — or runs two rounds
// in which the strategy's new global tensors are the received ones plus
// the rule applied to the participants' updates: the coordinate-wise
// median, the trimmed mean, or the clipped mean plus Gaussian noise of the
// configured scale.
func TestAggregationRules(t *testing.T) {
	skipPureGo(t)
	rules := []struct {
		name, word string
		opts       robust.Options
	}{
		{"median", "median", robust.Options{Rule: robust.Median}},
		{"trimmed-mean", "trimmed mean", robust.Options{Rule: robust.TrimmedMean, Trim: 0.34}},
		{"dp", "differential privacy", robust.Options{DP: &robust.DP{Clip: 0.05, NoiseMultiplier: 0.5, Delta: 1e-5, Seed: 9}}},
	}
	forEach(t, func(t *testing.T, name string) {
		r := ref(t, name)
		o := r.o
		o.Rounds, o.Fraction = 2, 1
		for _, rule := range rules {
			f := newFederated(t, o, name)
			opts := rule.opts
			opts.Logger = quiet()
			st, err := robust.Wrap(f.coord.Plan.Strategy, opts)
			if err != nil {
				if !strings.Contains(err.Error(), rule.word) {
					t.Errorf("%s refused without naming the rule (%q): %v", rule.name, rule.word, err)
				}
				t.Logf("%s: refused: %v", rule.name, err)
				continue
			}
			co := f.coordinator()
			co.Strategy, co.Rounds, co.Fraction = st, o.Rounds, o.Fraction
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
			if _, err := co.Run(context.Background()); err != nil {
				t.Fatalf("%s: %v", rule.name, err)
			}
			for round := range o.Rounds {
				checkRule(t, fmt.Sprintf("%s round %d", rule.name, round), rule.opts, before[round], after[round], ups[round])
			}
		}
	})
}

// checkRule checks one round of a robust rule: after = before + rule(upload
// − before) on every global tensor.
func checkRule(t *testing.T, what string, o robust.Options, before, after tensor.Named, ups map[int]tensor.Named) {
	t.Helper()
	if len(after) == 0 || len(ups) < 2 {
		t.Fatalf("%s: %d global tensors, %d uploads", what, len(after), len(ups))
	}
	ids := make([]int, 0, len(ups))
	for id := range ups {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	names := make([]string, 0, len(after))
	for n := range after {
		names = append(names, n)
	}
	sort.Strings(names)
	// updates, clipped for DP (all tensors of a site together)
	deltas := map[int]tensor.Named{}
	for _, id := range ids {
		d := tensor.Named{}
		var ss float64
		for _, n := range names {
			u, b := ups[id][n], before[n]
			if u == nil || b == nil || len(u.Data) != len(b.Data) {
				t.Fatalf("%s: site %d's upload or the base lacks %q", what, id, n)
			}
			x := make([]float64, len(u.Data))
			for j := range x {
				x[j] = float64(u.Data[j] - b.Data[j])
				ss += x[j] * x[j]
			}
			d[n] = &tensor.Tensor{Shape: u.Shape, Data: make([]float32, len(x))}
			for j := range x {
				d[n].Data[j] = float32(x[j])
			}
		}
		deltas[id] = d
		if o.DP != nil {
			if norm := math.Sqrt(ss); norm > o.DP.Clip {
				for _, v := range d {
					for j := range v.Data {
						v.Data[j] = float32(float64(v.Data[j]) * o.DP.Clip / norm)
					}
				}
			}
		}
	}
	var noise []float64
	for _, n := range names {
		for j := range after[n].Data {
			col := make([]float64, len(ids))
			for i, id := range ids {
				col[i] = float64(deltas[id][n].Data[j])
			}
			slices.Sort(col)
			var v float64
			switch {
			case o.DP != nil:
				for _, x := range col {
					v += x
				}
				v /= float64(len(col))
			case o.Rule == robust.Median:
				if k := len(col); k%2 == 1 {
					v = col[k/2]
				} else {
					v = (col[k/2-1] + col[k/2]) / 2
				}
			case o.Rule == robust.TrimmedMean:
				k := int(math.Floor(o.Trim * float64(len(col))))
				for _, x := range col[k : len(col)-k] {
					v += x
				}
				v /= float64(len(col) - 2*k)
			}
			want := float64(before[n].Data[j]) + v
			got := float64(after[n].Data[j])
			if o.DP != nil {
				noise = append(noise, got-want)
				continue
			}
			if math.Abs(got-want) > 1e-6*(1+math.Abs(want)) {
				t.Fatalf("%s: %s[%d] = %v, the rule gives %v", what, n, j, got, want)
			}
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
}
