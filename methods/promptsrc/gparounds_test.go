package promptsrc

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/tensor"
)

// flipGauss is FLiP's gauss (flcore/models/clip/PromptSRC.py get_gauss),
// normalised over a = 0..R−1 as its __init__ does, in float64 — the
// test's oracle, written from FLiP's formula, constant factor included.
func flipGauss(R int, mu, sigma float64) []float64 {
	g := make([]float64, R)
	var sum float64
	for a := range g {
		g[a] = (1 / (sigma * math.Sqrt(2*math.Pi))) * math.Exp(-0.5*math.Pow((float64(a)-mu)/sigma, 2))
		sum += g[a]
	}
	for a := range g {
		g[a] /= sum
	}
	return g
}

// TestRoundWeightsAreFLiPs: RoundWeights is FLiP's normalised Gaussian
// over the rounds 0..R−1 — its default (global_rounds 50: 51 rounds, μ 15,
// σ 1) and the round fixture's (3 rounds, μ 1, σ 1, flip_gpa_weights).
func TestRoundWeightsAreFLiPs(t *testing.T) {
	for _, c := range []struct {
		R         int
		mu, sigma float64
	}{{51, 15, 1}, {3, 1, 1}, {20, 30, 30}} {
		got, err := RoundWeights(c.R, c.mu, c.sigma)
		if err != nil {
			t.Fatal(err)
		}
		want := flipGauss(c.R, c.mu, c.sigma)
		for a := range want {
			if math.Abs(got[a]-want[a]) > 1e-12*math.Max(want[a], 1e-300) && math.Abs(got[a]-want[a]) > 1e-300 {
				t.Fatalf("R %d μ %v σ %v: g[%d] = %v, FLiP's %v", c.R, c.mu, c.sigma, a, got[a], want[a])
			}
		}
	}
	r, _ := paritytest.Read(t, dir+"round.safetensors")
	got, _ := RoundWeights(3, 1, 1)
	for a, w := range r["flip_gpa_weights"].Data {
		if math.Abs(got[a]-float64(w)) > 1e-7 {
			t.Errorf("fixture's flip_gpa_weights[%d] = %v, RoundWeights %v", a, w, got[a])
		}
	}
	if _, err := RoundWeights(0, 15, 1); err == nil || !strings.Contains(err.Error(), "federation.rounds") {
		t.Errorf("no rounds: %v", err)
	}
}

// upload is client c's synthetic upload of round r: values that differ by
// client, round and position.
func upload(c, r int) tensor.Named {
	t := tensor.New(2, 3)
	for i := range t.Data {
		t.Data[i] = float32(math.Sin(float64(1+c*7+r*13+i*3))) * float32(1+c)
	}
	return tensor.Named{"ctx": t}
}

// TestRoundsGPAOracle: FLiP's server-side rule over four rounds of two
// clients (8 and 4 examples), against a float64 restatement of
// receive_results + aggregate + gauss_avg: avg_r = Σ n_i·u_i / Σ n_i,
// S_0 = g_0·avg_0, S_r = S_{r−1} + g_r·avg_r; the clients receive S_r
// next round, and a strategy restored from the round-1 state continues the
// same sum.
func TestRoundsGPAOracle(t *testing.T) {
	const R = 4
	w, _ := RoundWeights(R, 1.5, 1)
	g := flipGauss(R, 1.5, 1)
	init := tensor.Named{"ctx": tensor.New(2, 3)}
	for i := range init["ctx"].Data {
		init["ctx"].Data[i] = 5 // S_0 must not keep it
	}
	build := func() *roundsGPA {
		s := newRoundsGPA(Shared, init, w)
		if err := s.Init([]federation.ClientInfo{{ID: 0, NumExamples: 8}, {ID: 1, NumExamples: 4}}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := build()
	S := make([]float64, 6)
	for r := range R {
		if r == 2 { // resume: a fresh strategy from the saved state
			st := s.State()
			s = build()
			if err := s.LoadState(st); err != nil {
				t.Fatal(err)
			}
		}
		u0, u1 := upload(0, r), upload(1, r)
		res := []federation.FitResult{{ClientID: 0, NumExamples: 8, Params: u0}, {ClientID: 1, NumExamples: 4, Params: u1}}
		if err := s.Aggregate(r, res, nil); err != nil {
			t.Fatal(err)
		}
		for i := range S {
			avg := (8*float64(u0["ctx"].Data[i]) + 4*float64(u1["ctx"].Data[i])) / 12
			if r == 0 {
				S[i] = 0
			}
			S[i] += g[r] * avg
		}
		sent, err := s.Configure(r+1, []int{0, 1})
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range sent[1]["ctx"].Data {
			if math.Abs(float64(v)-S[i]) > 1e-6*math.Max(math.Abs(S[i]), 1e-3) {
				t.Fatalf("round %d: client 1 receives ctx[%d] = %v, FLiP's running sum %v", r, i, v, S[i])
			}
		}
	}
	if err := s.Aggregate(R, nil, nil); err == nil || !strings.Contains(err.Error(), "gpa_rounds") {
		t.Errorf("a round beyond R: %v", err)
	}
}

// TestRoundsGPAProductionPath runs testdata/promptsrc/round with
// promptsrc.gpa_over=rounds (μ 1, σ 1 over the fixture's 3 rounds) through
// the production client and coordinator: the clients train as without it
// (one epoch: no client-side GPA) and the server holds global_gpa, FLiP's
// g_0·FedAvg after round 0, not the FedAvg.
func TestRoundsGPAProductionPath(t *testing.T) {
	m := paritytest.Model(t)
	f, err := parity.Load(m, dir+"init.safetensors", []string{dir + "round.safetensors"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sec, err := Method{}.SettingsFrom(f)
	if err != nil {
		t.Fatal(err)
	}
	s := sec.(*Settings)
	s.GPAOver, s.GPAMean, s.GPAStd, s.GPARounds = GPAOverRounds, 1, 1, 3
	out, err := parity.Round(context.Background(), Method{}, s, roundInputs(t, f))
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := paritytest.Read(t, dir+"round.safetensors")
	init, _ := paritytest.Read(t, dir+"init.safetensors")
	for p := range init {
		paritytest.Rel(t, "global "+p, out["global."+p], ref["global_gpa."+p], 1e-4)
		paritytest.Rel(t, "client0.trained."+p, out["client0.trained."+p], ref["client0.trained."+p], 1e-4)
	}
}

// TestGPAOverRefused: an unknown gpa_over and a negative gpa_rounds are
// refused naming the key; gpa_over rounds without any number of rounds
// fails to build, naming it.
func TestGPAOverRefused(t *testing.T) {
	for _, set := range []string{"promptsrc.gpa_over=round", "promptsrc.gpa_rounds=-1"} {
		_, err := config.Compose(config.Sources{Sets: []string{"methods=[promptsrc]", set}})
		if key, _, _ := strings.Cut(set, "="); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("--set %s: %v, want an error naming %s", set, err, key)
		}
	}
	sec := Method{}.DefaultConfig().(*Settings)
	sec.GPAOver = GPAOverRounds
	if _, err := buildSpec(&methods.Env{}, sec); err == nil || !strings.Contains(err.Error(), "promptsrc.gpa_over") {
		t.Errorf("rounds with no rounds: %v", err)
	}
}

// roundInputs is the round fixture's inputs as parity.RunRound reads them.
func roundInputs(t *testing.T, f *parity.Fixture) parity.RoundInputs {
	t.Helper()
	opts, err := f.TrainOptions()
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := f.IntsOf("tokens")
	if err != nil {
		t.Fatal(err)
	}
	in := parity.RoundInputs{Model: f.Model, Init: f.Params, Tokens: tokens, Train: opts,
		Classes: len(tokens) / f.Model.W.Config.Text.ContextLength}
	for i := range 2 {
		labels, err := f.IntsOf(fmt.Sprintf("client%d.labels", i))
		if err != nil {
			t.Fatal(err)
		}
		in.Clients = append(in.Clients, parity.TensorClient{Pixels: f.Batch[fmt.Sprintf("client%d.images", i)].Data, Labels: labels})
	}
	return in
}
