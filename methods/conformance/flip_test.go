package conformance

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/certs"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/transport"
)

// TestNetworkEqualsSimulationFLiP: with FLiP's protocol options on —
// federation.client_drop_rate 0.3 (2 of the 3 sites kept each round) and
// eval.personal — and PromptSRC's server-side GPA over rounds, serve's
// coordinator (its schedule as serve builds it) and three sites over real
// gRPC give the simulation's results bit for bit: the same sites dropped,
// the same global and site tensors, the same records (personal
// included) and summary.
func TestNetworkEqualsSimulationFLiP(t *testing.T) {
	skipPureGo(t)
	const name = "promptsrc"
	e := worldConfig(t, name, "federation.fraction=1", "federation.client_drop_rate=0.3", "eval.personal=true",
		"promptsrc.gpa_over=rounds", "promptsrc.gpa_mean=1")
	o := options(t, e, t.TempDir())
	res, err := simulate(t, o, -1, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := simOutcome(t, o, name, res)
	for _, r := range want.records {
		if len(r.Participants) != 2 {
			t.Fatalf("simulation round %d: participants %v, want 2 of 3", r.Round, r.Participants)
		}
		if _, ok := r.Mean[federation.PersonalMetric]; !ok {
			t.Fatalf("simulation round %d: no personal in %v", r.Round, r.Mean)
		}
	}
	f := newFederated(t, o, name)
	hist := runServeAndSites(t, f)
	got := f.outcome(hist)
	compare(t, "serve + sites over gRPC with FLiP's options", want, got)
	for i, w := range want.records {
		g := got.records[i]
		if !slices.Equal(g.Participants, w.Participants) || g.Mean[federation.PersonalMetric] != w.Mean[federation.PersonalMetric] {
			t.Errorf("round %d: over gRPC participants %v, personal %v; simulation %v, %v", w.Round,
				g.Participants, g.Mean[federation.PersonalMetric], w.Participants, w.Mean[federation.PersonalMetric])
		}
	}
	f.priv.report(t)
}

// runServeAndSites runs f's coordinator as serve builds it and its sites
// over gRPC with mTLS on loopback, and returns the coordinator's history.
func runServeAndSites(t *testing.T, f *federated) *federation.History {
	t.Helper()
	dir := t.TempDir()
	var names []string
	for i := range numClients {
		names = append(names, fmt.Sprintf("site-%d", i))
	}
	if err := certs.Init(dir, names, nil); err != nil {
		t.Fatal(err)
	}
	spec, err := f.coord.Spec()
	if err != nil {
		t.Fatal(err)
	}
	co := f.o.Federation().Coordinator(f.coord.Plan.Strategy)
	co.Parallel, co.Logger = numClients, quiet()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ready := make(chan string, 1)
	var hist *federation.History
	var cerr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		hist, cerr = transport.RunCoordinator(ctx, transport.CoordinatorConfig{Addr: "127.0.0.1:0", CertsDir: dir,
			StatePath: filepath.Join(dir, "coord.db"), Spec: transport.Spec(spec), PollWait: 500 * time.Millisecond,
			Heartbeat: 200 * time.Millisecond, Linger: time.Second, Logger: quiet(),
			Ready: func(g, _ string, _ *transport.Server) { ready <- g }}, co)
	}()
	var addr string
	select {
	case addr = <-ready:
	case <-done:
		t.Fatalf("coordinator: %v", cerr)
	}
	var wg sync.WaitGroup
	errs := make([]error, numClients)
	for i := range numClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = transport.RunSite(ctx, transport.SiteConfig{Addr: addr, CertsDir: dir, Name: names[i],
				StateDir: f.dirs[i], MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Logger: quiet()},
				&watched{Client: f.sites[i].Client(i), priv: f.priv})
		}()
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the federation did not finish in 3 minutes")
	}
	if cerr != nil {
		cancel()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("site %d: %v", i, err)
		}
	}
	if cerr != nil {
		t.Fatal(cerr)
	}
	return hist
}
