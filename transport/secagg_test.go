package transport

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/certs"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/secagg"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/transport/internal/toy"
)

func simulatedSecure() *federation.SimulatedSecure {
	return &federation.SimulatedSecure{Quant: secagg.Quantizer{Clip: secagg.DefaultClip, ScaleBits: secagg.DefaultScaleBits}}
}

// failFrom makes a client fail every fit and evaluation from round on (a
// site that died then), in process.
type failFrom struct {
	federation.Client
	round int
}

func (f failFrom) Fit(ctx context.Context, ins federation.FitIns) (federation.FitRes, error) {
	if ins.Round >= f.round {
		return federation.FitRes{}, errors.New("gone")
	}
	return f.Client.Fit(ctx, ins)
}

func (f failFrom) Evaluate(ctx context.Context, ins federation.EvaluateIns) (federation.EvaluateRes, error) {
	if ins.Round >= f.round {
		return federation.EvaluateRes{}, errors.New("gone")
	}
	return f.Client.Evaluate(ctx, ins)
}

// secureReference runs the toy federation in process with simulated secure
// aggregation; client dead fails from round deadFrom on (dead < 0: none).
func secureReference(t *testing.T, n, rounds int, seed uint64, dead, deadFrom int) tensor.Named {
	t.Helper()
	dir := t.TempDir()
	var proxies []federation.ClientProxy
	for i := range n {
		var c federation.Client = toy.New(i)
		if i == dead {
			c = failFrom{c, deadFrom}
		}
		proxies = append(proxies, federation.NewSite(c, filepath.Join(dir, fmt.Sprint(i))))
	}
	strat := toy.Strategy()
	c := &federation.Coordinator{Strategy: strat, Proxies: proxies, Rounds: rounds, Fraction: 1, Seed: seed, Logger: quietLogger(),
		Secure: simulatedSecure(), TolerateFailures: dead >= 0, MinFit: 1}
	if _, err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return strat.Global()
}

// TestSecureAggregationMatchesSimulation: a networked federation with
// secure aggregation ends bit-identical to the simulation's (the masked
// sum is exact), within the quantiser's reach of plain FedAvg, and the
// round reports count masked updates (8 bytes a value and the weight), as
// the simulation does.
func TestSecureAggregationMatchesSimulation(t *testing.T) {
	const n, rounds, seed = 3, 3, 7
	want := secureReference(t, n, rounds, seed, -1, 0)
	plain, _ := reference(t, n, rounds, 1, seed)
	f := startFed(t, fedOpts{n: n, rounds: rounds, fraction: 1, seed: seed, secure: true})
	f.wait(t)
	if f.err != nil {
		t.Fatal(f.err)
	}
	sameNamed(t, f.strat.Global(), want)
	for r, rep := range f.hist.Rounds {
		if rep.BytesUp != n*federation.MaskedBytes(3) || len(rep.Participants) != n {
			t.Errorf("round %d: %d bytes up (want %d masked), %d participants", r, rep.BytesUp, n*federation.MaskedBytes(3), len(rep.Participants))
		}
	}
	g, p := f.strat.Global()["shared.w"].Data, plain["shared.w"].Data
	for i := range g {
		if d := float64(g[i] - p[i]); d > 1e-5 || d < -1e-5 {
			t.Errorf("secure global %v, plain %v: beyond the quantisation's reach", g, p)
		}
	}
}

// TestSecureAggregationSurvivesDrop: site 2 of 3 stops right after sharing
// its keys in round 1 (its heartbeats stop: it is gone); the round closes
// with the other two (site 2's pairwise masks removed through its shares)
// and every later round runs without it. The result is bit-identical to the
// simulation in which site 2 fails from round 1 on.
func TestSecureAggregationSurvivesDrop(t *testing.T) {
	const n, rounds, seed = 3, 3, 7
	want := secureReference(t, n, rounds, seed, 2, 1)
	f := startFed(t, fedOpts{n: n, rounds: rounds, fraction: 1, seed: seed, secure: true, tolerate: true, minFit: 1,
		secAggHook: func(i int, step string, round int, stop context.CancelFunc) {
			if i == 2 && round == 1 && step == "SEC_AGG_STEP_SHARE" {
				stop()
			}
		}})
	f.wait(t)
	if f.err != nil {
		t.Fatal(f.err)
	}
	sameNamed(t, f.strat.Global(), want)
	r1 := f.hist.Rounds[1]
	if len(r1.Participants) != 2 || r1.Failures[2] == "" {
		t.Fatalf("round 1: participants %v, failures %v; want sites 0 and 1, site 2 failed", r1.Participants, r1.Failures)
	}
	found := false
	for _, e := range f.srv.cfg.Events.Recent() {
		found = found || (e.Kind == "secagg_dropped" && e.Round == 1 && strings.Contains(e.Message, "site-2"))
	}
	if !found {
		t.Error("no secagg_dropped event naming site-2 in round 1")
	}
}

// TestSecureAggregationProcesses runs a coordinator and three sites as
// processes over mTLS with secure aggregation, kills -9 site-2 right after
// it shared its keys in round 1, and checks that the run finishes with the
// simulation's global tensors bit for bit.
func TestSecureAggregationProcesses(t *testing.T) {
	t.Parallel() // processes that wait on each other and the network, not the CPU
	if testing.Short() {
		t.Skip("builds and runs processes; skipped with -short")
	}
	bin := testnode(t)
	const n, rounds, seed = 3, 3, 7
	want := secureReference(t, n, rounds, seed, 2, 1)
	dir := t.TempDir()
	var sites []string
	for i := range n {
		sites = append(sites, fmt.Sprintf("site-%d", i))
	}
	if err := certs.Init(dir, sites, nil); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	// -offline-after: on a loaded machine a live site's heartbeat can be
	// late by more than the default 900 ms, and a live site read offline
	// makes the round unmask without it; the killed site is still found
	// offline within seconds
	coord := start(t, bin, "-role", "coord", "-certs", dir, "-state", filepath.Join(dir, "coord.db"), "-addr", addr,
		"-rounds", fmt.Sprint(rounds), "-seed", fmt.Sprint(seed), "-secure", "-tolerate", "-offline-after", "5s")
	coord.waitLine(t, 10*time.Second, "coordinator listening")
	procs := make([]*proc, n)
	for i := range n {
		args := []string{"-role", "site", "-certs", dir, "-site", sites[i], "-addr", addr, "-state", filepath.Join(dir, "state", sites[i])}
		if i == 2 {
			args = append(args, "-stall-after-share", "1")
		}
		procs[i] = start(t, bin, args...)
	}
	procs[2].waitLine(t, 30*time.Second, "stalling after key sharing", "round=1")
	procs[2].kill()
	got := final(t, coord)
	sameNamed(t, got, want)
	out := coord.output()
	if !strings.Contains(out, "dropped_after_sharing=1") {
		t.Errorf("the coordinator did not unmask round 1 without site-2:\n%s", out)
	}
	if strings.Contains(out, `msg="update accepted"`) {
		t.Errorf("the coordinator accepted an update in the clear:\n%s", out)
	}
}

// TestSecureAggregationCoordinatorRestart kills -9 the coordinator of a
// secure federation mid-run and restarts it with the same flags: the
// interrupted round runs again in a new session and the run ends with the
// simulation's global tensors bit for bit.
func TestSecureAggregationCoordinatorRestart(t *testing.T) {
	t.Parallel() // processes that wait on each other and the network, not the CPU
	if testing.Short() {
		t.Skip("builds and runs processes; skipped with -short")
	}
	bin := testnode(t)
	const n, rounds, seed = 3, 5, 7
	want := secureReference(t, n, rounds, seed, -1, 0)
	dir := t.TempDir()
	var sites []string
	for i := range n {
		sites = append(sites, fmt.Sprintf("site-%d", i))
	}
	if err := certs.Init(dir, sites, nil); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	coordArgs := []string{"-role", "coord", "-certs", dir, "-state", filepath.Join(dir, "coord.db"), "-addr", addr,
		"-rounds", fmt.Sprint(rounds), "-seed", fmt.Sprint(seed), "-secure"}
	coord := start(t, bin, coordArgs...)
	coord.waitLine(t, 10*time.Second, "coordinator listening")
	procs := make([]*proc, n)
	for i := range n {
		procs[i] = start(t, bin, "-role", "site", "-certs", dir, "-site", sites[i], "-addr", addr,
			"-state", filepath.Join(dir, "state", sites[i]), "-delay", "150ms")
	}
	// killed in round 2's secure aggregation: a masked update is in, the
	// sum not yet unmasked (or, on a fast machine, just after)
	coord.waitLine(t, 30*time.Second, `msg="masked update accepted"`, "round=2")
	coord.kill()
	coord = start(t, bin, coordArgs...)
	coord.waitLine(t, 10*time.Second, "msg=resuming")
	got := final(t, coord)
	sameNamed(t, got, want)
	for i, p := range procs {
		select {
		case <-p.done:
			if p.err != nil {
				t.Errorf("site %d: %v\n%s", i, p.err, p.output())
			}
		case <-time.After(10 * time.Second):
			t.Errorf("site %d did not stop after the federation", i)
		}
	}
}
