package transport

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/transport/internal/toy"
)

// waitFor fails unless the federation ends within d.
func (f *fed) waitFor(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-f.done:
	case <-time.After(d):
		t.Fatalf("federation did not finish in %v", d)
	}
}

// untilRound waits until the coordinator has completed round r.
func (f *fed) untilRound(t *testing.T, r int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for f.srv.Status().Round <= r {
		if time.Now().After(deadline) {
			t.Fatalf("round %d never completed", r)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func slowClients(d time.Duration) func(i int) *toy.Client {
	return func(i int) *toy.Client {
		c := toy.New(i)
		c.Delay = d
		return c
	}
}

// TestDeadSiteNotWaitedFor: a site that dies (its heartbeats stop) while
// the coordinator has no round deadline is given up once offline, and the
// later rounds do not ask it; every such round names it absent.
func TestDeadSiteNotWaitedFor(t *testing.T) {
	f := startFed(t, fedOpts{n: 3, rounds: 6, fraction: 1, seed: 1, tolerate: true, minFit: 2, clients: slowClients(50 * time.Millisecond)})
	f.untilRound(t, 1)
	f.cancel[2]()
	f.waitFor(t, 15*time.Second)
	if f.err != nil {
		t.Fatal(f.err)
	}
	last := f.hist.Rounds[len(f.hist.Rounds)-1]
	if !slices.Equal(last.Absent, []int{2}) || !slices.Equal(last.Participants, []int{0, 1}) {
		t.Fatalf("last round: participants %v, absent %v; want [0 1] and [2]", last.Participants, last.Absent)
	}
	if !strings.Contains(last.Failures[2], "offline") {
		t.Fatalf("last round's failure of site 2: %q, want offline", last.Failures[2])
	}
}

// TestDeadSiteWithTimeout: with a round deadline the dead site's rounds do
// not each wait for the deadline once it is known offline.
func TestDeadSiteWithTimeout(t *testing.T) {
	f := startFed(t, fedOpts{n: 3, rounds: 8, fraction: 1, seed: 1, timeout: 3 * time.Second, minFit: 2, clients: slowClients(30 * time.Millisecond)})
	f.untilRound(t, 1)
	f.cancel[2]()
	t0 := time.Now()
	f.waitFor(t, 20*time.Second)
	if f.err != nil {
		t.Fatal(f.err)
	}
	// 6 rounds left: waiting for the deadline would take ≥ 18 s
	if d := time.Since(t0); d > 8*time.Second {
		t.Fatalf("the remaining rounds took %v: the offline site was waited for", d)
	}
	if last := f.hist.Rounds[len(f.hist.Rounds)-1]; !slices.Equal(last.Absent, []int{2}) {
		t.Fatalf("last round absent %v, want [2]", last.Absent)
	}
}

// TestSiteNeverRegisters: after --register-timeout the run starts with the
// sites there (≥ min-fit) and the missing one is absent from every round.
func TestSiteNeverRegisters(t *testing.T) {
	f := startFed(t, fedOpts{n: 3, rounds: 3, fraction: 1, seed: 1, tolerate: true, minFit: 2, registerTimeout: 500 * time.Millisecond,
		skipSite: map[int]bool{2: true}})
	f.waitFor(t, 15*time.Second)
	if f.err != nil {
		t.Fatal(f.err)
	}
	for _, r := range f.hist.Rounds {
		if !slices.Equal(r.Absent, []int{2}) || len(r.Participants) != 2 {
			t.Fatalf("round %d: participants %v, absent %v", r.Round, r.Participants, r.Absent)
		}
	}
}

// TestMinFitLargerThanFederation is refused at start.
func TestMinFitLargerThanFederation(t *testing.T) {
	dir := t.TempDir()
	coord := &federation.Coordinator{Strategy: toy.Strategy(), Rounds: 1, Fraction: 1, MinFit: 5, TolerateFailures: true}
	_, err := RunCoordinator(t.Context(), CoordinatorConfig{Addr: "127.0.0.1:0", Sites: []string{"a", "b", "c"}, Insecure: true,
		StatePath: filepath.Join(dir, "c.db"), Logger: quietLogger()}, coord)
	if err == nil || !strings.Contains(err.Error(), "--min-fit 5") {
		t.Fatalf("RunCoordinator = %v, want --min-fit refused", err)
	}
}

// TestMinFitWaitsAndResumes: with --min-fit 3 and a site down, the round
// waits instead of ending the run, and completes with all three once the
// site is back.
func TestMinFitWaitsAndResumes(t *testing.T) {
	o := fedOpts{n: 3, rounds: 5, fraction: 1, seed: 1, tolerate: true, minFit: 3, retryEvery: 200 * time.Millisecond,
		clients: slowClients(30 * time.Millisecond)}
	f := startFed(t, o)
	f.untilRound(t, 1)
	f.cancel[2]()
	time.Sleep(1500 * time.Millisecond)
	select {
	case <-f.done:
		t.Fatalf("the coordinator ended with a site down: %v", f.err)
	default:
	}
	go RunSite(t.Context(), SiteConfig{Addr: f.grpcAddr, CertsDir: f.dir, Name: f.sites[2],
		StateDir: filepath.Join(f.dir, "state", f.sites[2]), MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Logger: quietLogger()}, toy.New(2))
	f.waitFor(t, 20*time.Second)
	if f.err != nil {
		t.Fatal(f.err)
	}
	for _, r := range f.hist.Rounds {
		if len(r.Participants) != 3 {
			t.Fatalf("round %d aggregated %v, want all three", r.Round, r.Participants)
		}
	}
}

// TestConfigMismatchRefused: a site with other settings is refused at
// registration, told the differing keys, and ends with ErrRefused.
func TestConfigMismatchRefused(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errs := make(chan error, 2)
	startFed(t, fedOpts{ctx: ctx, n: 2, rounds: 2, fraction: 1, seed: 1, siteErrs: errs,
		coordSettings: []string{"federation.rounds=2", "optim.lr=0.002"},
		siteSettings: func(i int) []string {
			if i == 1 {
				return []string{"federation.rounds=2", "optim.lr=0.01"}
			}
			return []string{"federation.rounds=2", "optim.lr=0.002"}
		}})
	select {
	case err := <-errs:
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "optim.lr: coordinator 0.002, site 0.01") {
			t.Fatalf("site: %v, want a refusal naming optim.lr", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the mismatched site was not refused")
	}
}

// TestDuplicateSessionRefused: a second process on one certificate is
// refused while the first is connected; the federation goes on.
func TestDuplicateSessionRefused(t *testing.T) {
	f := startFed(t, fedOpts{n: 2, rounds: 6, fraction: 1, seed: 1, clients: slowClients(100 * time.Millisecond)})
	f.untilRound(t, 0)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err := RunSite(ctx, SiteConfig{Addr: f.grpcAddr, CertsDir: f.dir, Name: f.sites[0], StateDir: t.TempDir(),
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, DuplicateGrace: 500 * time.Millisecond, Logger: quietLogger()}, toy.New(0))
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("second session: %v, want refused", err)
	}
	f.waitFor(t, 20*time.Second)
	if f.err != nil {
		t.Fatal(f.err)
	}
}

// TestSitesLearnCoordinatorFailed: when the coordinator's run fails (here:
// a poisoned upload with no failure tolerated), the connected sites are
// told and end with ErrCoordinatorFailed instead of "done".
func TestSitesLearnCoordinatorFailed(t *testing.T) {
	errs := make(chan error, 2)
	f := startFed(t, fedOpts{n: 2, rounds: 3, fraction: 1, seed: 1, siteErrs: errs, clients: func(i int) *toy.Client {
		c := toy.New(i)
		c.Poison = i == 1
		return c
	}})
	f.waitFor(t, 20*time.Second)
	if f.err == nil {
		t.Fatal("the coordinator did not fail")
	}
	select {
	case err := <-errs:
		if !errors.Is(err, ErrCoordinatorFailed) {
			t.Fatalf("site: %v, want ErrCoordinatorFailed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no site learned that the coordinator failed")
	}
}
