package transport

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/transport/internal/toy"
)

// overlapMeter counts how many of its clients are in Fit or Evaluate at
// once, and the most ever.
type overlapMeter struct {
	mu       sync.Mutex
	now, top int
}

type metered struct {
	federation.Client
	m *overlapMeter
}

func (c metered) enter() {
	c.m.mu.Lock()
	c.m.now++
	c.m.top = max(c.m.top, c.m.now)
	c.m.mu.Unlock()
	time.Sleep(5 * time.Millisecond) // room for another client to overlap
}

func (c metered) leave() {
	c.m.mu.Lock()
	c.m.now--
	c.m.mu.Unlock()
}

func (c metered) Fit(ctx context.Context, ins federation.FitIns) (federation.FitRes, error) {
	c.enter()
	defer c.leave()
	return c.Client.Fit(ctx, ins)
}

func (c metered) Evaluate(ctx context.Context, ins federation.EvaluateIns) (federation.EvaluateRes, error) {
	c.enter()
	defer c.leave()
	return c.Client.Evaluate(ctx, ins)
}

// TestRunSitesMatchesInProcess: a coordinator asking 5 sites in parallel,
// served by two multi-client processes (RunSites over sites 0-2 and 3-4,
// each site with its own certificate and state folder), ends with the
// in-process federation's global tensors and history, bit for bit, and the
// clients of one process never train or evaluate at the same time.
func TestRunSitesMatchesInProcess(t *testing.T) {
	const n, rounds, seed = 5, 3, 11
	want, wantHist := reference(t, n, rounds, 1, seed)
	skip := map[int]bool{}
	for i := range n {
		skip[i] = true
	}
	f := startFed(t, fedOpts{n: n, rounds: rounds, fraction: 1, seed: seed, skipSite: skip})
	meters := []*overlapMeter{{}, {}}
	errs := make(chan error, 2)
	for p, ids := range [][]int{{0, 1, 2}, {3, 4}} {
		var hosted []HostedSite
		for _, i := range ids {
			hosted = append(hosted, HostedSite{
				Config: SiteConfig{Addr: f.grpcAddr, CertsDir: f.dir, Name: f.sites[i], StateDir: filepath.Join(f.dir, "state", f.sites[i]),
					MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Logger: quietLogger()},
				Client: metered{Client: toy.New(i), m: meters[p]},
			})
		}
		go func() { errs <- RunSites(t.Context(), hosted, 1) }()
	}
	f.wait(t)
	if f.err != nil {
		t.Fatal(f.err)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("a multi-client site process: %v", err)
		}
	}
	sameNamed(t, f.strat.Global(), want)
	if len(f.hist.Rounds) != rounds {
		t.Fatalf("%d rounds, want %d", len(f.hist.Rounds), rounds)
	}
	for r := range rounds {
		if g, w := f.hist.Rounds[r], wantHist.Rounds[r]; len(g.Selected) != n || len(g.Fit) != len(w.Fit) {
			t.Errorf("round %d: %+v, want %+v", r, g, w)
		}
	}
	for p, m := range meters {
		if m.top != 1 {
			t.Errorf("process %d: %d of its clients worked at once, want 1 (in turn)", p, m.top)
		}
	}
}

// TestRunSitesStopsOnRefusal: when one hosted site is refused for good
// (its certificate's site is unknown to the coordinator), the process's
// other sites are stopped and the error names both.
func TestRunSitesStopsOnRefusal(t *testing.T) {
	skip := map[int]bool{0: true, 1: true}
	f := startFed(t, fedOpts{n: 2, rounds: 1, fraction: 1, skipSite: skip})
	hosted := []HostedSite{
		{Config: SiteConfig{Addr: f.grpcAddr, CertsDir: f.dir, Name: f.sites[0], StateDir: filepath.Join(t.TempDir(), "a"),
			MinBackoff: 20 * time.Millisecond, Logger: quietLogger()}, Client: toy.New(0)},
		// client 1 presenting site-0's name: the coordinator refuses its ID
		{Config: SiteConfig{Addr: f.grpcAddr, CertsDir: f.dir, Name: f.sites[0], StateDir: filepath.Join(t.TempDir(), "b"),
			MinBackoff: 20 * time.Millisecond, Logger: quietLogger(), DuplicateGrace: 300 * time.Millisecond}, Client: toy.New(1)},
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := RunSites(ctx, hosted, 1)
	if err == nil || !errors.Is(err, ErrRefused) || ctx.Err() != nil {
		t.Fatalf("RunSites: %v; want a refusal before the deadline", err)
	}
	if !strings.Contains(err.Error(), "were stopped: site-0") {
		t.Errorf("the error does not name the stopped site: %v", err)
	}
}
