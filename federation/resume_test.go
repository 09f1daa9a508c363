package federation

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/tensor"
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

func newResumeSim(strategy Strategy, clients []Client, dir string) *Simulation {
	return &Simulation{Strategy: strategy, Clients: clients, Rounds: 6, Fraction: 0.5, Seed: 11,
		EvalEvery: 2, CheckpointDir: dir, Logger: quiet}
}

// bitsEqual compares two tensor sets bit for bit.
func bitsEqual(a, b tensor.Named) string {
	if len(a) != len(b) {
		return "different names"
	}
	for k, x := range a {
		y, ok := b[k]
		if !ok || !reflect.DeepEqual(x.Shape, y.Shape) {
			return k + ": missing or shape"
		}
		for i := range x.Data {
			if math.Float32bits(x.Data[i]) != math.Float32bits(y.Data[i]) {
				return k
			}
		}
	}
	return ""
}

func stripTimes(h *History) []RoundReport {
	out := append([]RoundReport(nil), h.Rounds...)
	for i := range out {
		out[i].Seconds = 0
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

func (c *cancelAt) Fit(ctx context.Context, round int, in tensor.Named) (tensor.Named, map[string]float64, error) {
	if round == c.round {
		if *c.fits++; *c.fits == 2 {
			c.cancel()
		}
	}
	return c.Client.Fit(ctx, round, in)
}

func TestResumeBitIdentical(t *testing.T) {
	errStop := errors.New("stop requested")
	interrupts := map[string]func(t *testing.T, sim *Simulation){
		// OnRound asks to stop after round 2 (rounds 0-2 checkpointed).
		"stop after round 2": func(t *testing.T, sim *Simulation) {
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
		"cancel mid round 3": func(t *testing.T, sim *Simulation) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			fits := 0
			for i := range sim.Clients {
				sim.Clients[i] = &cancelAt{Client: sim.Clients[i], round: 3, fits: &fits, cancel: cancel}
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
					if d := bitsEqual(a, b); d != "" {
						t.Errorf("client %d state differs at %s", i, d)
					}
				}
				if d := bitsEqual(strategy.State(), refSim.Strategy.State()); d != "" {
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

func sampleCheckpoint() *Checkpoint {
	return &Checkpoint{
		NextRound: 2, Strategy: "fedavg", Seed: 5, Fraction: 0.25, Sampler: []byte{1, 2, 3, 255},
		History: History{Rounds: []RoundReport{
			{Round: 0, Selected: []int{0, 1}, Fit: map[int]Metrics{0: {"loss": math.NaN()}, 1: {"loss": math.Inf(1)}},
				FitMean: Metrics{"loss": math.NaN()}, BytesUp: 8, BytesDown: 4, Seconds: 0.125},
			{Round: 1, Selected: []int{1}, Fit: map[int]Metrics{1: {"loss": 0.1 + 0.2}}, FitMean: Metrics{"loss": 0.1 + 0.2},
				Eval: map[int]Metrics{0: {"acc": 1.0 / 3}, 1: {"acc": math.Inf(-1)}}, EvalMean: Metrics{"acc": math.Inf(-1)}},
		}},
		Clients: map[int]tensor.Named{
			0: {"param/w": {Shape: []int{2, 2}, Data: []float32{1, -0, float32(math.NaN()), 3.5}}, "rng": BytesTensor([]byte{7, 8})},
			1: {"param/w": {Shape: []int{2, 2}, Data: []float32{5, 6, 7, 8}}, "empty": {Shape: []int{0}, Data: []float32{}}},
		},
		StrategyState: tensor.Named{"global/shared.w": vec(0.5, 0.25)},
	}
}

func TestCheckpointRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.ckpt")
	want := sampleCheckpoint()
	if err := WriteCheckpoint(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.NextRound != 2 || got.Strategy != "fedavg" || got.Seed != 5 || got.Fraction != 0.25 || string(got.Sampler) != string(want.Sampler) {
		t.Errorf("header fields: %+v", got)
	}
	for id, st := range want.Clients {
		if d := bitsEqual(st, got.Clients[id]); d != "" {
			t.Errorf("client %d differs at %s", id, d)
		}
	}
	if d := bitsEqual(want.StrategyState, got.StrategyState); d != "" {
		t.Errorf("strategy differs at %s", d)
	}
	h := got.History.Rounds
	if len(h) != 2 || !math.IsNaN(h[0].Fit[0]["loss"]) || !math.IsInf(h[0].Fit[1]["loss"], 1) ||
		h[1].Fit[1]["loss"] != 0.1+0.2 || h[1].Eval[0]["acc"] != 1.0/3 || h[0].Eval != nil || h[0].Seconds != 0.125 {
		t.Errorf("history did not round-trip: %+v", h)
	}
	// Overwriting leaves no temporary files behind.
	if err := WriteCheckpoint(path, want); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries after two writes, want 1", len(entries))
	}
}

func TestCheckpointCorrupt(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.ckpt")
	if err := WriteCheckpoint(path, sampleCheckpoint()); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Tensors are stored in sorted name order after the 8-byte magic; the
	// first is client/0/param/w.
	tests := []struct {
		name   string
		mutate func([]byte) []byte
		token  string
	}{
		{"tensor byte", func(b []byte) []byte { b[9] ^= 1; return b }, `tensor "client/0/param/w": checksum`},
		{"index byte", func(b []byte) []byte { b[len(b)-40] ^= 1; return b }, "index: checksum"},
		{"truncated", func(b []byte) []byte { return b[:len(b)-10] }, "trailer"},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }, "magic"},
		{"empty", func(b []byte) []byte { return nil }, "too short"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".ckpt")
			if err := os.WriteFile(p, tc.mutate(append([]byte(nil), good...)), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ReadCheckpoint(p)
			if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), tc.token) {
				t.Errorf("error = %v, want one naming %s and containing %s", err, p, tc.token)
			}
		})
	}
	// Resume reports the damaged file too.
	sim := newResumeSim(&FedAvg{Shared: Names("shared.w")}, toyClients(0, false), dir)
	sim.Rounds = 1
	if _, err := sim.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(dir, CheckpointFile)
	b, _ := os.ReadFile(ckpt)
	b[20] ^= 0xff
	if err := os.WriteFile(ckpt, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.Resume(context.Background()); err == nil || !strings.Contains(err.Error(), ckpt) || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("resume from damaged checkpoint: %v", err)
	}
}

func FuzzReadCheckpoint(f *testing.F) {
	dir := f.TempDir()
	path := filepath.Join(dir, "seed.ckpt")
	if err := WriteCheckpoint(path, sampleCheckpoint()); err != nil {
		f.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := readCheckpoint(bytes.NewReader(data), int64(len(data)))
		if err == nil && c.Clients == nil {
			t.Error("nil clients without error")
		}
	})
}
