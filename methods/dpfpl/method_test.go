package dpfpl

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// smallPlan builds dpfpl on the two clients of testdata/promptfl's round
// (8 and 4 images, 5 classes, 4 "X" placeholders), batches of 4.
func smallPlan(t *testing.T, s *Settings) (*methods.Plan, *methods.Env) {
	t.Helper()
	m := paritytest.Model(t)
	batch, _, err := prompt.ReadFile(paritytest.Testdata + "promptfl/round.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := prompt.Ints(batch, "tokens")
	if err != nil {
		t.Fatal(err)
	}
	var clients []parity.TensorClient
	for _, c := range []string{"client0", "client1"} {
		labels, err := prompt.Ints(batch, c+".labels")
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, parity.TensorClient{Pixels: batch[c+".images"].Data, Labels: labels})
	}
	opts := train.Options{Epochs: 1, Batch: 4, Optimizer: "sgd", LR: 0.01, Momentum: 0.9, WD: 5e-4}
	env, err := parity.TensorEnv(m, methods.Features, tokens, 5, clients, opts, 7)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.TrainStore.Close() })
	plan, err := Method{}.Build(env, s)
	if err != nil {
		t.Fatal(err)
	}
	return plan, env
}

func smallSettings() *Settings {
	s := defaultSettings()
	s.NCtx, s.Rank, s.Epsilon = 4, 2, 0.4
	return s
}

// epsAt is the ε at delta of steps Gaussians of multiplier z, then of one
// Gaussian of each multiplier in more.
func epsAt(t *testing.T, z float64, steps int, delta float64, more ...float64) float64 {
	t.Helper()
	var a Accountant
	a.Spend(1, z, steps)
	for _, m := range more {
		a.Spend(1, m, 1)
	}
	e, err := a.Epsilon(delta)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// near: equal up to the float32 the factors are saved in.
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(math.Abs(a), math.Abs(b)) }

// TestEpsilonPerRound: each Fit reports the ε of every Gaussian released so
// far: two a local step (gU and gV; client 0 has 8 images, 2 batches of 4 a
// round) and the server's one a round at the sensitivity of the round's
// upload: 2 steps at lr η, momentum 0.9 kept across rounds, so a change Δ
// at step 1 moves the upload by η(1+0.9), at step 2 by η (2.9·η·Δ: the
// first round), and from the second round on the buffer the round starts
// from (≤ Δ/(1−0.9)) by η(0.9+0.81)/(1−0.9) more: 20·η·Δ in all. The
// multipliers are σ/2.9, then σ/20. At the batch clipping's sensitivity 2C
// instead of C/B (B = 4) they are divided by 8 (σ/8 for the local
// releases). A client restored from
// its state reports what the one that went on reports, with the same
// parameters.
func TestEpsilonPerRound(t *testing.T) {
	s := smallSettings()
	plan, _ := smallPlan(t, s)
	if err := plan.Strategy.Init([]federation.ClientInfo{{ID: 0, NumExamples: 8}, {ID: 1, NumExamples: 4}}); err != nil {
		t.Fatal(err)
	}
	global := plan.Global()
	c := plan.Clients[0] // 8 images: 2 batches a round
	sigma := s.Sigma()
	var prev float64
	var saved tensor.Named
	for round := range 3 {
		if round == 1 {
			var err error
			if saved, err = c.State(); err != nil {
				t.Fatal(err)
			}
		}
		res, err := c.Fit(context.Background(), federation.FitIns{Round: round, Params: global.Clone()})
		if err != nil {
			t.Fatal(err)
		}
		steps := 2 * 2 * (round + 1) // gU and gV, 2 batches a round
		global, global8 := []float64{sigma / 2.9}, []float64{sigma / 2.9 / 8}
		for range round {
			global, global8 = append(global, sigma/20), append(global8, sigma/20/8)
		}
		want := map[string]float64{
			"dp_epsilon_local":             epsAt(t, sigma, steps, s.Delta),
			"dp_epsilon_global":            epsAt(t, 1, 0, s.Delta, global...),
			"dp_epsilon_local_batch_clip":  epsAt(t, sigma/8, steps, s.Delta),
			"dp_epsilon_global_batch_clip": epsAt(t, 1, 0, s.Delta, global8...),
			// everything released: both ledgers composed
			"dp_epsilon_total":            epsAt(t, sigma, steps, s.Delta, global...),
			"dp_epsilon_total_batch_clip": epsAt(t, sigma/8, steps, s.Delta, global8...),
		}
		for k, w := range want {
			if !near(res.Metrics[k], w) {
				t.Errorf("round %d: %s %g, want %g", round, k, res.Metrics[k], w)
			}
		}
		wantLocal := want["dp_epsilon_local"]
		if !(wantLocal > prev) {
			t.Errorf("round %d: ε %g did not grow from %g", round, wantLocal, prev)
		}
		prev = wantLocal
	}
	final, err := c.State()
	if err != nil {
		t.Fatal(err)
	}
	// a fresh client restored from its state after round 0
	plan2, _ := smallPlan(t, s)
	c2 := plan2.Clients[0]
	if err := c2.LoadState(saved); err != nil {
		t.Fatal(err)
	}
	var res federation.FitRes
	for round := 1; round < 3; round++ {
		if res, err = c2.Fit(context.Background(), federation.FitIns{Round: round, Params: global.Clone()}); err != nil {
			t.Fatal(err)
		}
	}
	if want := epsAt(t, sigma, 12, s.Delta); !near(res.Metrics["dp_epsilon_local"], want) {
		t.Errorf("resumed client reports ε %g, want %g", res.Metrics["dp_epsilon_local"], want)
	}
	if want := epsAt(t, 1, 0, s.Delta, sigma/2.9, sigma/20, sigma/20); !near(res.Metrics["dp_epsilon_global"], want) {
		t.Errorf("resumed client reports global ε %g, want %g", res.Metrics["dp_epsilon_global"], want)
	}
	final2, err := c2.State()
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range final {
		if !slices.Equal(v.Data, final2[name].Data) {
			t.Errorf("resumed client's %s differs", name)
		}
	}
}

// TestServerNoise: the server's global is the uniform mean of the uploads
// minus η·ν, ν ∼ N(0, (s/K)²) with s = σ·C/B; the same round draws the same
// noise (resume), another round other noise.
func TestServerNoise(t *testing.T) {
	s := smallSettings()
	plan, env := smallPlan(t, s)
	infos := []federation.ClientInfo{{ID: 0, NumExamples: 8}, {ID: 1, NumExamples: 4}}
	if err := plan.Strategy.Init(infos); err != nil {
		t.Fatal(err)
	}
	shape := plan.Global()[ParamGlobal].Shape
	a, b := tensor.New(shape...), tensor.New(shape...)
	for i := range a.Data {
		a.Data[i], b.Data[i] = float32(i%7)*0.1, -float32(i%5)*0.1
	}
	results := []federation.FitResult{
		{ClientID: 0, NumExamples: 8, Params: tensor.Named{ParamGlobal: a},
			Metrics: map[string]float64{"dp_epsilon_global": 0.5, "dp_epsilon_local": 3, "acc": 90}},
		{ClientID: 1, NumExamples: 4, Params: tensor.Named{ParamGlobal: b},
			Metrics: map[string]float64{"dp_epsilon_global": 0.7, "dp_epsilon_local": 2}},
	}
	noise := func(round int) []float64 {
		if err := plan.Strategy.Init(infos); err != nil {
			t.Fatal(err)
		}
		if err := plan.Strategy.Aggregate(round, results, nil); err != nil {
			t.Fatal(err)
		}
		g := plan.Global()[ParamGlobal].Data
		out := make([]float64, len(g))
		for i := range g {
			mean := (float64(a.Data[i]) + float64(b.Data[i])) / 2 // uniform, not 8:4
			out[i] = (mean - float64(g[i])) / env.Train.LR
		}
		return out
	}
	nu := noise(3)
	rm, ok := plan.Strategy.(interface{ RoundMetrics() federation.Metrics })
	if !ok {
		t.Fatal("the server reports no round metrics")
	}
	// the federation spends what its worst site spends
	if got := rm.RoundMetrics(); len(got) != 2 || got["dp_epsilon_global"] != 0.7 || got["dp_epsilon_local"] != 3 {
		t.Errorf("after round 3: %v, want dp_epsilon_global 0.7 and dp_epsilon_local 3 (the largest)", got)
	}
	want := s.Sigma() * s.NormThresh / 4 / 2
	var ss, sum float64
	for _, v := range nu {
		ss += v * v
		sum += v
	}
	sd := math.Sqrt(ss / float64(len(nu)))
	if math.Abs(sd-want) > 0.1*want || math.Abs(sum/float64(len(nu))) > 0.2*want {
		t.Errorf("server noise: mean %g, sd %g over %d values, want N(0, %g²)", sum/float64(len(nu)), sd, len(nu), want)
	}
	again, other := noise(3), noise(4)
	for i := range nu {
		if math.Abs(again[i]-nu[i]) > 1e-9*want {
			t.Fatal("the same round drew other noise")
		}
	}
	if slices.Equal(nu, other) {
		t.Error("two rounds drew the same noise")
	}
	// one participant: ν ∼ N(0, s²)
	if err := plan.Strategy.Init(infos); err != nil {
		t.Fatal(err)
	}
	if err := plan.Strategy.Aggregate(5, results[:1], nil); err != nil {
		t.Fatal(err)
	}
	ss = 0
	for i, v := range plan.Global()[ParamGlobal].Data {
		d := (float64(a.Data[i]) - float64(v)) / env.Train.LR
		ss += d * d
	}
	if sd1 := math.Sqrt(ss / float64(len(nu))); math.Abs(sd1-2*want) > 0.2*want {
		t.Errorf("one participant: noise sd %g, want %g", sd1, 2*want)
	}
	// with ε = 0 the server is the plain uniform mean
	s0 := smallSettings()
	s0.Epsilon = 0
	plan0, _ := smallPlan(t, s0)
	if err := plan0.Strategy.Init(infos); err != nil {
		t.Fatal(err)
	}
	if err := plan0.Strategy.Aggregate(0, results, nil); err != nil {
		t.Fatal(err)
	}
	for i, v := range plan0.Global()[ParamGlobal].Data {
		if want := (a.Data[i] + b.Data[i]) / 2; v != want {
			t.Fatalf("ε = 0: global[%d] = %g, want the mean %g", i, v, want)
		}
	}
}

// TestSettingsErrors: bad settings name their key.
func TestSettingsErrors(t *testing.T) {
	s := smallSettings()
	s.Rank = 5
	if _, err := settings(s); err == nil {
		t.Error("rank > n_ctx accepted")
	}
	s = smallSettings()
	s.Delta = 0
	if _, err := settings(s); err == nil {
		t.Error("delta 0 accepted")
	}
	if _, err := settingsFromMeta(map[string]string{"n_ctx": "4"}); err == nil {
		t.Error("metadata without rank accepted")
	}
}

// TestFactorizationRefused: the authors' --factorization variants other
// than dpfpl (dplora: U·V without the residual; promptfl, fedotp, fedpgp)
// are not implemented, and every way in refuses them naming the key and
// the value instead of running dpfpl under their name: the run
// configuration (dpfpl.factorization), the settings, and the step and round
// fixtures' metadata (`pfedmma step/round --set factorization=…`).
func TestFactorizationRefused(t *testing.T) {
	refused := func(where string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "factorization") || !strings.Contains(err.Error(), "dplora") {
			t.Errorf("%s: factorization dplora gave %v, want an error naming the key and the value", where, err)
		}
	}
	e, err := config.Preset("world-compare")
	if err != nil {
		t.Fatal(err)
	}
	e.Methods = []string{"dpfpl"} // the only method this package registers
	if err := e.Set("dpfpl.factorization", "dplora"); err != nil {
		t.Fatal(err)
	}
	refused("run configuration", e.Validate())
	if err := e.Set("dpfpl.factorization", "dpfpl"); err != nil {
		t.Fatal(err)
	}
	if err := e.Validate(); err != nil {
		t.Errorf("factorization dpfpl: %v", err)
	}
	s := smallSettings()
	s.Factorization = "dplora"
	_, err = settings(s)
	refused("settings", err)

	m := paritytest.Model(t)
	td := paritytest.Testdata + "dpfpl/"
	f, err := parity.Load(m, td+"init.safetensors", []string{td + "step.safetensors"}, []string{"factorization=dplora"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Method{}.Step(context.Background(), f)
	refused("step", err)
	f, err = parity.Load(m, td+"init.safetensors", []string{td + "round.safetensors"}, []string{"factorization=dplora"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Method{}.SettingsFrom(f)
	refused("round", err)
}

// TestLedgerState: a site's ledger survives its state; a state without the
// upload factors (written before they were counted) or with a wrong count is
// refused naming the key, rather than resuming with an under-count.
func TestLedgerState(t *testing.T) {
	l := Ledger{LocalSteps: 7, UploadFactors: []float64{2.5, 20}}
	got, err := loadLedger(saveLedger(l))
	if err != nil || got.LocalSteps != 7 || !slices.Equal(got.UploadFactors, l.UploadFactors) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	st := saveLedger(l)
	delete(st, factorsKey)
	if _, err := loadLedger(st); err == nil || !strings.Contains(err.Error(), factorsKey) {
		t.Errorf("state without %s: %v", factorsKey, err)
	}
	st = saveLedger(l)
	st[factorsKey].Data[0] = 3
	if _, err := loadLedger(st); err == nil || !strings.Contains(err.Error(), factorsKey) {
		t.Errorf("wrong count: %v", err)
	}
	st = saveLedger(l)
	delete(st, stepsKey)
	if _, err := loadLedger(st); err == nil || !strings.Contains(err.Error(), stepsKey) {
		t.Errorf("state without %s: %v", stepsKey, err)
	}
}
