package strategy

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	. "github.com/pfedmma/pfedmma/federation"

	"github.com/pfedmma/pfedmma/internal/tensortest"
)

// strategies used by the resume tests, each with the toy client's names.
var resumeStrategies = map[string]func() Strategy{
	"fedavg":       func() Strategy { return &FedAvg{Shared: Names("shared.w")} },
	"uniform-mean": func() Strategy { return UniformMean(Names("shared.w"), nil) },
	"knn-pool":     func() Strategy { return &KNNPool{Shared: Names("shared.w"), K: 2} },
	"relay":        func() Strategy { return &Relay{Relayed: Names("own.v"), Averaged: Names("shared.w")} },
}

const resumeClients = 6

func toyClients(jitter float32, relayOwn bool) []Client {
	out := make([]Client, resumeClients)
	for id := range out {
		c := newToy(id, jitter)
		c.relayOwn = relayOwn
		out[id] = c
	}
	return out
}

// sites wraps clients in Sites whose state lives under dir/site-<id> (no
// state files when dir is empty).
func sites(clients []Client, dir string) []ClientProxy {
	out := make([]ClientProxy, len(clients))
	for i, c := range clients {
		d := ""
		if dir != "" {
			d = filepath.Join(dir, fmt.Sprintf("site-%d", c.ID()))
		}
		out[i] = NewSite(c, d)
	}
	return out
}

func newResumeSim(strategy Strategy, clients []Client, dir string) *Coordinator {
	return &Coordinator{Strategy: strategy, Proxies: sites(clients, dir), Rounds: 6, Fraction: 0.5, Seed: 11,
		EvalEvery: 2, Store: FileStore{Path: filepath.Join(dir, CheckpointFile)}, Logger: quiet}
}
func stripTimes(h *History) []RoundReport {
	out := append([]RoundReport(nil), h.Rounds...)
	for i := range out {
		out[i].Seconds, out[i].FitSeconds, out[i].AggregateSeconds, out[i].EvalSeconds = 0, 0, 0, 0
	}
	return out
}

// cancelAt cancels the run's context when the second client is asked to
// fit in round, so the first one has already trained.
type cancelAt struct {
	Client
	round  int
	fits   *int
	cancel context.CancelFunc
}

func (c *cancelAt) Fit(ctx context.Context, ins FitIns) (FitRes, error) {
	if ins.Round == c.round {
		if *c.fits++; *c.fits == 2 {
			c.cancel()
		}
	}
	return c.Client.Fit(ctx, ins)
}

func TestResumeBitIdentical(t *testing.T) {
	errStop := errors.New("stop requested")
	interrupts := map[string]func(t *testing.T, sim *Coordinator){
		// OnRound asks to stop after round 2 (rounds 0-2 checkpointed).
		"stop after round 2": func(t *testing.T, sim *Coordinator) {
			sim.OnRound = func(r RoundReport) error {
				if r.Round == 2 {
					return errStop
				}
				return nil
			}
			if _, err := sim.Run(context.Background()); !errors.Is(err, errStop) {
				t.Fatalf("interrupted run: %v", err)
			}
		},
		// The context is cancelled in the middle of round 3, after some
		// clients have already trained (their in-memory state is dirty).
		"cancel mid round 3": func(t *testing.T, sim *Coordinator) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			fits := 0
			for i, p := range sim.Proxies {
				s := p.(*Site)
				sim.Proxies[i] = NewSite(&cancelAt{Client: s.Client, round: 3, fits: &fits, cancel: cancel}, s.Store.Dir)
			}
			hist, err := sim.Run(ctx)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled run: %v", err)
			}
			if len(hist.Rounds) != 3 || fits != 2 {
				t.Fatalf("cancelled run completed %d rounds after %d fits in round 3, want 3 and 2", len(hist.Rounds), fits)
			}
		},
	}
	for sname, mk := range resumeStrategies {
		relayOwn := sname == "relay"
		ref := toyClients(0, relayOwn)
		refSim := newResumeSim(mk(), ref, t.TempDir())
		refHist, err := refSim.Run(context.Background())
		if err != nil {
			t.Fatalf("%s: %v", sname, err)
		}
		for iname, interrupt := range interrupts {
			t.Run(sname+"/"+iname, func(t *testing.T) {
				dir := t.TempDir()
				interrupt(t, newResumeSim(mk(), toyClients(0, relayOwn), dir))
				// Fresh clients with another initialisation and a fresh
				// strategy: everything must come from the checkpoint.
				clients := toyClients(0.37, relayOwn)
				strategy := mk()
				hist, err := newResumeSim(strategy, clients, dir).Resume(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(stripTimes(hist), stripTimes(refHist)) {
					t.Errorf("history differs:\n got %+v\nwant %+v", stripTimes(hist), stripTimes(refHist))
				}
				for i := range clients {
					a, _ := clients[i].State()
					b, _ := ref[i].State()
					if d := tensortest.BitsDiff(a, b); d != "" {
						t.Errorf("client %d state differs at %s", i, d)
					}
				}
				if d := tensortest.BitsDiff(strategy.State(), refSim.Strategy.State()); d != "" {
					t.Errorf("strategy state differs at %s", d)
				}
				ck, err := ReadCheckpoint(filepath.Join(dir, CheckpointFile))
				if err != nil || ck.NextRound != 6 {
					t.Errorf("final checkpoint: next round %v, %v", ck, err)
				}
			})
		}
	}
}

func TestResumeErrors(t *testing.T) {
	dir := t.TempDir()
	sim := newResumeSim(&FedAvg{Shared: Names("shared.w")}, toyClients(0, false), dir)
	if _, err := sim.Resume(context.Background()); !errors.Is(err, ErrNoCheckpoint) {
		t.Errorf("resume without checkpoint: %v", err)
	}
	sim.Rounds = 2
	if _, err := sim.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	other := newResumeSim(&KNNPool{Shared: Names("shared.w")}, toyClients(0, false), dir)
	if _, err := other.Resume(context.Background()); err == nil || !strings.Contains(err.Error(), "knn-pool") {
		t.Errorf("resume with another strategy: %v", err)
	}
	fewer := newResumeSim(&FedAvg{Shared: Names("shared.w")}, toyClients(0, false)[:4], dir)
	if _, err := fewer.Resume(context.Background()); err == nil {
		t.Error("resume with fewer clients succeeded")
	}
	// Resuming a finished run with more rounds extends it.
	more := newResumeSim(&FedAvg{Shared: Names("shared.w")}, toyClients(0, false), dir)
	more.Rounds = 3
	hist, err := more.Resume(context.Background())
	if err != nil || len(hist.Rounds) != 3 {
		t.Errorf("extending a run: %d rounds, %v", len(hist.Rounds), err)
	}
}
