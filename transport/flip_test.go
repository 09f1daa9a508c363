package transport

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/transport/internal/toy"
)

// TestNetworkDropAndPersonalMatchInProcess: with FLiP's client drop rate
// and personal evaluation on, the federation over the network drops the
// same sites, aggregates the same global part bit for bit and records the
// same fit metrics (the personal evaluation of each freshly trained
// model among them) and personal accuracy as the in-process run.
func TestNetworkDropAndPersonalMatchInProcess(t *testing.T) {
	const n, rounds, seed, rate = 4, 4, 5, 0.3
	dir := t.TempDir()
	var proxies []federation.ClientProxy
	for i := range n {
		proxies = append(proxies, federation.NewSite(toy.New(i), filepath.Join(dir, fmt.Sprint(i))))
	}
	strat := toy.Strategy()
	c := &federation.Coordinator{Strategy: strat, Proxies: proxies, Rounds: rounds, Fraction: 1, Seed: seed, Logger: quietLogger(),
		DropRate: rate, PersonalEval: true}
	want, err := c.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	f := startFed(t, fedOpts{n: n, rounds: rounds, fraction: 1, seed: seed, dropRate: rate, personal: true})
	f.wait(t)
	if f.err != nil {
		t.Fatal(f.err)
	}
	sameNamed(t, f.strat.Global(), strat.Global())
	for r := range rounds {
		g, w := f.hist.Rounds[r], want.Rounds[r]
		if len(w.Dropped) != 2 { // ⌊0.7·4⌋ = 2 kept
			t.Fatalf("round %d: in process dropped %v, want 2 of 4", r, w.Dropped)
		}
		if _, ok := w.Fit[w.Participants[0]][federation.PersonalPrefix+"mse"]; !ok {
			t.Fatalf("round %d: no personal evaluation in the fit metrics %v", r, w.Fit)
		}
		if !slices.Equal(g.Dropped, w.Dropped) || !slices.Equal(g.Participants, w.Participants) ||
			fmt.Sprint(g.Fit) != fmt.Sprint(w.Fit) || fmt.Sprint(g.PersonalMean) != fmt.Sprint(w.PersonalMean) ||
			fmt.Sprint(g.Personal) != fmt.Sprint(w.Personal) {
			t.Fatalf("round %d: network dropped %v, fit %v, personal %v; in process %v, %v, %v",
				r, g.Dropped, g.Fit, g.PersonalMean, w.Dropped, w.Fit, w.PersonalMean)
		}
	}
}
