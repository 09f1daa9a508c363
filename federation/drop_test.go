package federation

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDropKeepIsFLiPs: the number kept is Python's int((1 - rate) * m),
// hand-evaluated (including the float64 rounding of 1 − rate).
func TestDropKeepIsFLiPs(t *testing.T) {
	for _, c := range []struct {
		rate       float64
		m, want    int
		pythonExpr string
	}{
		{0, 10, 10, "int((1-0)*10)"},
		{0.1, 10, 9, "int((1-0.1)*10)"},
		{0.3, 10, 7, "int((1-0.3)*10)"},
		{0.5, 3, 1, "int((1-0.5)*3)"},
		{0.2, 4, 3, "int((1-0.2)*4)"},   // 0.8*4 = 3.2
		{0.7, 10, 3, "int((1-0.7)*10)"}, // 0.30000000000000004*10
		{0.9, 3, 0, "int((1-0.9)*3)"},
	} {
		if got := DropKeep(c.rate, c.m); got != c.want {
			t.Errorf("DropKeep(%v, %d) = %d, want %s = %d", c.rate, c.m, got, c.pythonExpr, c.want)
		}
	}
}

// TestDroppedIsTheSeeds: the drop is a function of (seed, round, selected)
// alone — the same arguments give the same clients in any order of
// selected, another seed another pattern — it drops m − ⌊(1−rate)·m⌋ of
// the selected, and over many rounds each client is dropped at about the
// rate (uniform).
func TestDroppedIsTheSeeds(t *testing.T) {
	sel := []int{3, 7, 11, 20, 42}
	counts := map[int]int{}
	differ := false
	const rounds = 4000
	for r := range rounds {
		d := Dropped(5, r, sel, 0.4)
		if len(d) != 5-DropKeep(0.4, 5) {
			t.Fatalf("round %d: dropped %v, want %d of %v", r, d, 5-DropKeep(0.4, 5), sel)
		}
		if !slices.IsSorted(d) {
			t.Fatalf("round %d: dropped %v not sorted", r, d)
		}
		for _, id := range d {
			if !slices.Contains(sel, id) {
				t.Fatalf("round %d: dropped %d, not selected", r, id)
			}
			counts[id]++
		}
		rev := slices.Clone(sel)
		slices.Reverse(rev)
		if again := Dropped(5, r, rev, 0.4); !slices.Equal(again, d) {
			t.Fatalf("round %d: same seed dropped %v, then %v", r, d, again)
		}
		differ = differ || !slices.Equal(Dropped(6, r, sel, 0.4), d)
	}
	if !differ {
		t.Error("seeds 5 and 6 dropped the same clients in every round")
	}
	for _, id := range sel {
		// each client is dropped with probability 2/5; 4000 rounds: σ ≈ 31
		if f := float64(counts[id]); math.Abs(f-rounds*0.4) > 200 {
			t.Errorf("client %d dropped in %v of %d rounds, want about %v", id, f, rounds, rounds*0.4)
		}
	}
	if d := Dropped(5, 1, sel, 0); d != nil {
		t.Errorf("rate 0 dropped %v", d)
	}
	if d := Dropped(5, 1, sel, 0.99); len(d) != 4 {
		t.Errorf("rate 0.99 dropped %v; at least one is kept", d)
	}
}

// dropRun runs stepClients with example counts 1..6 for 4 rounds at drop
// rate 0.5 (fraction 1: 6 selected, 3 kept every round).
func dropRun(t *testing.T, c *Coordinator) (*meanStrategy, *History) {
	t.Helper()
	s := &meanStrategy{}
	_, proxies := stepSites("", 1, 2, 3, 4, 5, 6)
	c.Strategy, c.Proxies, c.Rounds, c.Fraction, c.Seed, c.DropRate = s, proxies, 4, 1, 11, 0.5
	h, err := c.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s, h
}

// TestDropLosesTheUpdate: a dropped client trained (its Fit ran) but its
// upload does not reach the aggregate: the strategy receives exactly the
// selected clients less the dropped (3 of 6), the dropped as failures,
// and the global part is the hand-computed mean of the kept uploads,
// weighted among themselves; the round report lists the dropped apart
// from participants and failures.
func TestDropLosesTheUpdate(t *testing.T) {
	s, h := dropRun(t, &Coordinator{})
	ns := []int{1, 2, 3, 4, 5, 6}
	g := []float64{0, 0}
	everDropped := map[int]bool{}
	for r, rep := range h.Rounds {
		if len(rep.Dropped) != 3 {
			t.Fatalf("round %d: dropped %v, want 3 of 6 (⌊0.5·6⌋ kept)", r, rep.Dropped)
		}
		kept := slices.DeleteFunc(slices.Clone(rep.Selected), func(id int) bool { return slices.Contains(rep.Dropped, id) })
		if !slices.Equal(s.results[r], kept) || !slices.Equal(rep.Participants, kept) {
			t.Fatalf("round %d: strategy got %v, participants %v, want the kept %v", r, s.results[r], rep.Participants, kept)
		}
		if !slices.Equal(s.failures[r], rep.Dropped) || len(rep.Failures) != 0 {
			t.Fatalf("round %d: strategy's failures %v, report's %v; want the dropped %v as strategy failures only", r, s.failures[r], rep.Failures, rep.Dropped)
		}
		for _, id := range rep.Dropped {
			everDropped[id] = true
			if _, ok := rep.Fit[id]; ok {
				t.Errorf("round %d: dropped client %d's training metrics kept", r, id)
			}
		}
		// the oracle: g += Σ_kept n_i·(i+1) / Σ_kept n_i (and 10× for g[1])
		var num, den float64
		for _, id := range kept {
			num += float64(ns[id] * (id + 1))
			den += float64(ns[id])
		}
		g[0] += num / den
		g[1] += 10 * num / den
	}
	if len(everDropped) < 2 {
		t.Errorf("the same client(s) %v dropped in every round", everDropped)
	}
	if math.Abs(float64(s.g[0])-g[0]) > 1e-5*g[0] || math.Abs(float64(s.g[1])-g[1]) > 1e-5*g[1] {
		t.Fatalf("global %v, hand-computed mean of the kept uploads %v", s.g, g)
	}
}

// TestDropResumeSameDrops: a run stopped after round 1 and resumed drops
// the same clients in every round and ends with the same global part as
// the uninterrupted run.
func TestDropResumeSameDrops(t *testing.T) {
	ctx := context.Background()
	run := func(dir string, stopAfter int, resume bool) (*meanStrategy, *History, error) {
		_, proxies := stepSites(dir, 1, 2, 3, 4, 5)
		s := &meanStrategy{}
		c := &Coordinator{Strategy: s, Proxies: proxies, Rounds: 5, Fraction: 0.8, Seed: 3, DropRate: 0.3,
			Store: FileStore{Path: filepath.Join(dir, "ckpt")},
			OnRound: func(rep RoundReport) error {
				if rep.Round == stopAfter {
					return errors.New("stop")
				}
				return nil
			}}
		if resume {
			h, err := c.Resume(ctx)
			return s, h, err
		}
		h, err := c.Run(ctx)
		return s, h, err
	}
	want, wantH, err := run(t.TempDir(), -1, false)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, _, err := run(dir, 1, false); err == nil || !strings.Contains(err.Error(), "stop") {
		t.Fatalf("stopped run: %v", err)
	}
	s, h, err := run(dir, -1, true)
	if err != nil {
		t.Fatal(err)
	}
	some := false
	for r := range 5 {
		some = some || len(wantH.Rounds[r].Dropped) > 0
		if !slices.Equal(h.Rounds[r].Dropped, wantH.Rounds[r].Dropped) {
			t.Errorf("round %d: resumed dropped %v, uninterrupted %v", r, h.Rounds[r].Dropped, wantH.Rounds[r].Dropped)
		}
	}
	if !some {
		t.Fatal("no client dropped at rate 0.3")
	}
	if !slices.Equal(s.g, want.g) {
		t.Fatalf("resumed global %v, uninterrupted %v", s.g, want.g)
	}
}

// TestDropSetupRefused: a rate outside [0, 1), one that keeps no client
// or fewer than MinFit, and one with secure aggregation are refused,
// naming the key.
func TestDropSetupRefused(t *testing.T) {
	for _, c := range []struct {
		rate   float64
		minFit int
		secure bool
		want   string
	}{
		{1, 0, false, "not in [0, 1)"},
		{-0.1, 0, false, "not in [0, 1)"},
		{math.NaN(), 0, false, "not in [0, 1)"},
		{0.9, 0, false, "= 0 of the 3 clients"},
		{0.5, 2, false, "= 1 of the 3 clients"},
		{0.2, 0, true, "secure_aggregation"},
	} {
		_, proxies := stepSites("", 1, 2, 3)
		co := &Coordinator{Strategy: &meanStrategy{}, Proxies: proxies, Rounds: 1, Fraction: 1, DropRate: c.rate, MinFit: c.minFit}
		if c.secure {
			co.Secure = &SimulatedSecure{}
		}
		_, err := co.Run(context.Background())
		if err == nil || !strings.Contains(err.Error(), "federation.client_drop_rate") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("rate %v min_fit %d secure %v: %v, want an error naming federation.client_drop_rate and %q", c.rate, c.minFit, c.secure, err, c.want)
		}
	}
}

// TestPersonalEval: with PersonalEval each kept participant scores the
// model it just trained, before aggregation (stepClient: its g[0] after
// adding id+1), and the round's personal accuracy is their mean weighted
// by example counts — hand-computed here from the previous global — over
// the kept clients only (drop rate 0.5).
func TestPersonalEval(t *testing.T) {
	_, h := dropRun(t, &Coordinator{PersonalEval: true, EvalEvery: 1})
	ns := []int{1, 2, 3, 4, 5, 6}
	prev := 0.0 // g[0] before the round
	for r, rep := range h.Rounds {
		var num, den, agg float64
		for _, id := range rep.Participants {
			acc := prev + float64(id+1)
			if got := rep.Personal[id]; math.Abs(got-acc) > 1e-5*acc {
				t.Errorf("round %d client %d: personal %v, want its trained model's %v", r, id, got, acc)
			}
			num += float64(ns[id]) * acc
			den += float64(ns[id])
			agg += float64(ns[id]) * float64(id+1)
		}
		if len(rep.Personal) != len(rep.Participants) {
			t.Errorf("round %d: personal of %v, participants %v", r, rep.Personal, rep.Participants)
		}
		if got, want := rep.PersonalMean[PersonalMetric], num/den; math.Abs(got-want) > 1e-5*want {
			t.Errorf("round %d: personal %v, hand-computed weighted mean %v", r, got, want)
		}
		prev += agg / den
	}
	if _, h := dropRun(t, &Coordinator{}); h.Rounds[0].PersonalMean != nil || h.Rounds[0].Personal != nil {
		t.Errorf("personal evaluation off, yet recorded: %v", h.Rounds[0].PersonalMean)
	}
}
