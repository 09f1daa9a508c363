package dpfpl

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// TestOrdersAsOracle: Orders() is the list the float64 oracle
// (reference/dpfpl/rdp_oracle.py, orders()) minimises over:
// 1 + x/10 for x = 1..100, 12..63, then 64, 72, …, 4096.
func TestOrdersAsOracle(t *testing.T) {
	var want []float64
	for x := 1; x < 101; x++ {
		want = append(want, 1+float64(x)/10)
	}
	for a := 12; a < 64; a++ {
		want = append(want, float64(a))
	}
	want = append(want, 64, 72, 80, 96, 112, 128, 160, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)
	if got := Orders(); !slices.Equal(got, want) {
		t.Errorf("Orders() has %d orders, the oracle %d: %v", len(got), len(want), got)
	}
}

// TestGaussianRDPNotComputed: GaussianRDP is +Inf where it is not
// computed — z = 0 (also at a whole order with q < 1, where the sum would
// divide by zero) and orders α ≤ 1 — and 0 for q = 0.
func TestGaussianRDPNotComputed(t *testing.T) {
	for _, tc := range []struct{ q, z, alpha float64 }{
		{0.5, 0, 2}, {0.5, 0, 7}, {1, 0, 2}, {1, 1, 1}, {0.5, 1, 1}, {0.5, 1, 2.5},
	} {
		if got := GaussianRDP(tc.q, tc.z, tc.alpha); !math.IsInf(got, 1) {
			t.Errorf("GaussianRDP(q %g, z %g, α %g) = %g, want +Inf", tc.q, tc.z, tc.alpha, got)
		}
	}
	if got := GaussianRDP(0, 1, 2); got != 0 {
		t.Errorf("q = 0: %g, want 0", got)
	}
	if got, want := GaussianRDP(1, 2, 3), 3/(2*4.0); got != want {
		t.Errorf("q = 1: %g, want α/(2z²) = %g", got, want)
	}
}

// TestEpsilonFromRDPBounds: δ must lie in (0, 1); an order α ≤ 1 is
// skipped (its conversion term log((α−1)/α) is −∞), so adding it changes
// nothing.
func TestEpsilonFromRDPBounds(t *testing.T) {
	for _, delta := range []float64{0, 1, -1e-5, 1.5} {
		if _, _, err := EpsilonFromRDP([]float64{0.1}, []float64{2}, delta); err == nil || !strings.Contains(err.Error(), "delta") {
			t.Errorf("δ %g: %v, want an error naming delta", delta, err)
		}
	}
	alone, order, err := EpsilonFromRDP([]float64{0.01}, []float64{2}, 1e-5)
	if err != nil || order != 2 {
		t.Fatal(err, order)
	}
	// by hand: 0.01 + log(1/2) − (log 1e-5 + log 2)/1
	if want := 0.01 + math.Log(0.5) - (math.Log(1e-5) + math.Log(2)); math.Abs(alone-want) > 1e-12 {
		t.Errorf("ε %g, want %g", alone, want)
	}
	with, order, err := EpsilonFromRDP([]float64{0.01, 0.01}, []float64{1, 2}, 1e-5)
	if err != nil || with != alone || order != 2 {
		t.Errorf("with order 1: ε %g at order %g (%v), want %g at 2", with, order, err, alone)
	}
}

// TestLedgerEpsilonsBounds: batch 1 is a batch; batch 0 and σ = 0 are
// errors; a round whose upload factor is 0 (every step at learning rate
// 0: the upload does not depend on the data) releases nothing.
func TestLedgerEpsilonsBounds(t *testing.T) {
	l := Ledger{LocalSteps: 2, UploadFactors: []float64{1}}
	eps, err := l.Epsilons(3, 1, 1e-5)
	if err != nil || !(eps[MetricLocal] > 0) {
		t.Errorf("batch 1: %v, %v", eps, err)
	}
	for _, tc := range []struct {
		sigma float64
		batch int
	}{{3, 0}, {0, 4}, {math.NaN(), 4}} {
		if _, err := l.Epsilons(tc.sigma, tc.batch, 1e-5); err == nil {
			t.Errorf("σ %g, batch %d accepted", tc.sigma, tc.batch)
		}
	}
	zero := Ledger{LocalSteps: 0, UploadFactors: []float64{0, 0}}
	eps, err = zero.Epsilons(3, 4, 1e-5)
	if err != nil || eps[MetricGlobal] != 0 || eps[MetricGlobalBatchClip] != 0 {
		t.Errorf("upload factors 0: %v, %v, want global ε 0", eps, err)
	}
}

// TestLedgerZeroFactor: an upload factor of 0 is a valid saved value.
func TestLedgerZeroFactor(t *testing.T) {
	l := Ledger{LocalSteps: 3, UploadFactors: []float64{0, 2}}
	got, err := loadLedger(saveLedger(l))
	if err != nil || got.LocalSteps != 3 || !slices.Equal(got.UploadFactors, l.UploadFactors) {
		t.Errorf("round trip: %+v, %v", got, err)
	}
}

// TestConfigValidateBounds: every limit of Config.Validate on both sides.
func TestConfigValidateBounds(t *testing.T) {
	ok := Config{NCtx: 4, Rank: 2, ClipNorm: 1, NoiseStd: 0.1, InitStd: 0.02}
	with := func(f func(*Config)) Config { c := ok; f(&c); return c }
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string
	}{
		{"valid", ok, ""},
		{"n_ctx 1, rank 1", with(func(c *Config) { c.NCtx, c.Rank = 1, 1 }), ""},
		{"n_ctx 0", with(func(c *Config) { c.NCtx, c.Rank = 0, 0 }), "n_ctx 0"},
		{"rank 0", with(func(c *Config) { c.Rank = 0 }), "rank 0"},
		{"rank = n_ctx", with(func(c *Config) { c.Rank = 4 }), ""},
		{"rank n_ctx+1", with(func(c *Config) { c.Rank = 5 }), "rank 5"},
		{"norm_thresh 0", with(func(c *Config) { c.ClipNorm = 0 }), "norm_thresh 0"},
		{"smallest norm_thresh", with(func(c *Config) { c.ClipNorm = math.SmallestNonzeroFloat64 }), ""},
		{"norm_thresh +Inf", with(func(c *Config) { c.ClipNorm = math.Inf(1) }), "norm_thresh"},
		{"noise 0", with(func(c *Config) { c.NoiseStd = 0 }), ""},
		{"noise -1", with(func(c *Config) { c.NoiseStd = -1 }), "noise standard deviation -1"},
		{"init_std 0", with(func(c *Config) { c.InitStd = 0 }), ""},
		{"init_std -0.1", with(func(c *Config) { c.InitStd = -0.1 }), "init_std -0.1"},
		{"per-example batch 1", with(func(c *Config) { c.PerExampleDP, c.DPBatch = true, 1 }), ""},
		{"per-example batch 0", with(func(c *Config) { c.PerExampleDP = true }), "per_example_dp with batch 0"},
	} {
		err := tc.cfg.Validate()
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
		}
	}
}

// narrowModel is a 1-block text tower of width 4 (context 16) and the
// tokens of C prompts "SOT X×nCtx c . EOT".
func narrowModel(C, nCtx int) (*clip.Model, []int) {
	cfg := clip.Config{EmbedDim: 6,
		Vision: clip.VisionConfig{ImageSize: 8, PatchSize: 4, Width: 8, Layers: 1, Heads: 2, MLPWidth: 16},
		Text:   clip.TextConfig{ContextLength: 16, VocabSize: 20, Width: 4, Layers: 1, Heads: 2, MLPWidth: 8}}
	tok := make([]int, C*16)
	for c := 0; c < C; c++ {
		row := tok[c*16:]
		row[0] = 18
		for p := 1; p <= nCtx; p++ {
			row[p] = 5
		}
		row[nCtx+1], row[nCtx+2], row[nCtx+3] = 6+c, 3, 19
	}
	return clip.New(clip.Random(cfg, 5)), tok
}

// TestNewRankAndInit: the rank may equal the prompt width D but not
// exceed it; G and L are drawn N(0, init_std²) (sample standard deviation
// near init_std; all zero for init_std 0).
func TestNewRankAndInit(t *testing.T) {
	m, tokens := narrowModel(3, 6)
	if _, err := New(m, tokens, Config{NCtx: 6, Rank: 5, ClipNorm: 1}); err == nil || !strings.Contains(err.Error(), "rank 5 exceeds the prompt width 4") {
		t.Errorf("rank 5 > D 4: %v", err)
	}
	l, err := New(m, tokens, Config{NCtx: 6, Rank: 4, ClipNorm: 1, InitStd: 0.02, Seed: 9})
	if err != nil {
		t.Fatalf("rank = D: %v", err)
	}
	var ss float64
	n := 0
	for _, p := range []*tensor.Tensor{l.Global, l.Local} {
		for _, v := range p.Data {
			ss += float64(v) * float64(v)
			n++
		}
	}
	if sd := math.Sqrt(ss / float64(n)); sd < 0.6*0.02 || sd > 1.5*0.02 {
		t.Errorf("init: sample sd %g over %d values, want about 0.02", sd, n)
	}
	z, err := New(m, tokens, Config{NCtx: 6, Rank: 4, ClipNorm: 1, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*tensor.Tensor{z.Global, z.Local} {
		if slices.ContainsFunc(p.Data, func(v float32) bool { return v != 0 }) {
			t.Error("init_std 0: non-zero context")
		}
	}
}

// perExampleLearners are two learners on the same model, prompts and
// initial contexts, with and without per_example_dp.
func perExampleLearners(t *testing.T, cfg Config) (plain, perEx *Learner) {
	t.Helper()
	m, tokens := randomModel(4, 3)
	var err error
	if plain, err = New(m, tokens, cfg); err != nil {
		t.Fatal(err)
	}
	cfg.PerExampleDP, cfg.DPBatch = true, 5
	if perEx, err = New(m, tokens, cfg); err != nil {
		t.Fatal(err)
	}
	return plain, perEx
}

// TestPerExampleStepOutputs: with per_example_dp a step's loss and logits
// are the plain step's; with noise off (s = 0) the mechanism is off in
// both modes (no clipping), so all gradients equal the plain learner's;
// with noise on the local context's gradient is compute_full_grad of the
// per-example gU and gV, (I + U·Uᵀ)·(gU/10)·V + U·(gV/10), checked here in
// float64.
func TestPerExampleStepOutputs(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	img := gradcheck.Rand(rng, 5*6, 1)
	labels := []int{0, 3, 1, 2, 1}
	n, r := 3, 2
	for _, sd := range []float64{0, 0.05} {
		plain, perEx := perExampleLearners(t, Config{NCtx: n, Rank: r, ClipNorm: 1e-3, NoiseStd: sd, InitStd: 0.7, Seed: 4})
		D := plain.D
		lossP, _, logitsP, err := plain.Step(img, labels)
		if err != nil {
			t.Fatal(err)
		}
		logitsP = slices.Clone(logitsP)
		lossE, _, logitsE, err := perEx.Step(img, labels)
		if err != nil {
			t.Fatal(err)
		}
		if lossE != lossP || !slices.Equal(logitsE, logitsP) {
			t.Errorf("noise %g: per-example step loss %g, logits %v; plain %g, %v", sd, lossE, logitsE, lossP, logitsP)
		}
		draws := recorded{"omega": randVec(rng, D*r, 1), "noise_u": randVec(rng, n*r, sd),
			"noise_v": randVec(rng, r*D, sd), "noise_g": randVec(rng, n*D, sd)}
		if err := plain.Privatize(draws); err != nil {
			t.Fatal(err)
		}
		if err := perEx.Privatize(draws); err != nil {
			t.Fatal(err)
		}
		if sd == 0 {
			for name, g := range plain.Grads() {
				if !slices.Equal(g.Data, perEx.Grads()[name].Data) {
					t.Errorf("noise off: per-example %s gradient differs from the plain one", name)
				}
			}
			continue
		}
		U, V := to64(perEx.U), to64(perEx.V)
		a, b := to64(perEx.GU), to64(perEx.GV)
		for i := range a {
			a[i] /= 10
		}
		for i := range b {
			b[i] /= 10
		}
		av := matmul64(a, V, n, r, D)
		want := matmul64(matmul64(U, transpose(U, n, r), n, r, n), av, n, n, D)
		ub := matmul64(U, b, n, r, D)
		var md, mx float64
		for i := range want {
			want[i] += av[i] + ub[i]
			md = math.Max(md, math.Abs(float64(perEx.gLocal.Data[i])-want[i]))
			mx = math.Max(mx, math.Abs(want[i]))
		}
		if mx == 0 || md > 1e-5*mx {
			t.Errorf("per-example local gradient: max |Δ| %g of max %g", md, mx)
		}
	}
}

// TestSettingsRanges: δ must lie in (0, 1) and calibration_rounds be at
// least 1 even where they do not change the noise (ε = 0, or δ = 1 making
// log(1/δ) = 0); the limits themselves are valid.
func TestSettingsRanges(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Settings)
		bad  bool
	}{
		{"ε 0, δ 0", func(s *Settings) { s.Epsilon, s.Delta = 0, 0 }, true},
		{"δ 1", func(s *Settings) { s.Delta = 1 }, true},
		{"ε 0, δ 1", func(s *Settings) { s.Epsilon, s.Delta = 0, 1 }, true},
		{"δ 0.5", func(s *Settings) { s.Delta = 0.5 }, false},
		{"calibration_rounds 1", func(s *Settings) { s.CalibrationRounds = 1 }, false},
		{"calibration_rounds 0", func(s *Settings) { s.CalibrationRounds = 0 }, true},
		{"ε 0", func(s *Settings) { s.Epsilon = 0 }, false},
	} {
		s := smallSettings()
		tc.mod(s)
		_, err := settings(s)
		if tc.bad != (err != nil) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

// envWith is smallPlan's environment with training options opts.
func envWith(t *testing.T, opts train.Options) *methods.Env {
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
	env, err := parity.TensorEnv(m, methods.Features, tokens, 5, clients, opts, 7)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.TrainStore.Close() })
	return env
}

// TestBuildRefusesOptimizerWithNoise: with ε > 0 only SGD (named, or the
// default "") is accepted, the refusal naming the optimizer; with ε = 0
// any optimizer is.
func TestBuildRefusesOptimizerWithNoise(t *testing.T) {
	for _, tc := range []struct {
		opt string
		eps float64
		bad bool
	}{{"adamw", 0.4, true}, {"adamw", 0, false}, {"", 0.4, false}, {"sgd", 0.4, false}} {
		s := smallSettings()
		s.Epsilon = tc.eps
		env := envWith(t, train.Options{Epochs: 1, Batch: 4, Optimizer: tc.opt, LR: 0.01})
		_, err := Method{}.Build(env, s)
		if tc.bad != (err != nil) || (tc.bad && !strings.Contains(err.Error(), "optimizer adamw")) {
			t.Errorf("optimizer %q, ε %g: %v", tc.opt, tc.eps, err)
		}
	}
}

// TestFitMetrics: a site's Fit reports its training loss and accuracy
// beside the ε it spent; with ε = 0 it reports no ε and no error.
func TestFitMetrics(t *testing.T) {
	for _, eps := range []float64{0.4, 0} {
		s := smallSettings()
		s.Epsilon = eps
		plan, _ := smallPlan(t, s)
		if err := plan.Strategy.Init([]federation.ClientInfo{{ID: 0, NumExamples: 8}, {ID: 1, NumExamples: 4}}); err != nil {
			t.Fatal(err)
		}
		res, err := plan.Clients[0].Fit(context.Background(), federation.FitIns{Round: 0, Params: plan.Global()})
		if err != nil {
			t.Fatalf("ε %g: %v", eps, err)
		}
		_, hasLoss := res.Metrics["loss"]
		_, hasAcc := res.Metrics["train_acc"]
		_, hasEps := res.Metrics[MetricLocal]
		if !hasLoss || !hasAcc || hasEps != (eps > 0) {
			t.Errorf("ε %g: metrics %v", eps, res.Metrics)
		}
	}
}

// TestServerNoNoiseIgnoresReplay: with s = 0 (ε = 0) the server is the
// plain uniform mean even when a fixture's recorded server noise is at
// hand, and reports no privacy spent.
func TestServerNoNoiseIgnoresReplay(t *testing.T) {
	s := smallSettings()
	s.Epsilon = 0
	plan, _ := smallPlan(t, s)
	infos := []federation.ClientInfo{{ID: 0, NumExamples: 8}, {ID: 1, NumExamples: 4}}
	if err := plan.Strategy.Init(infos); err != nil {
		t.Fatal(err)
	}
	srv := plan.Strategy.(*server)
	shape := plan.Global()[ParamGlobal].Shape
	a, b, ones := tensor.New(shape...), tensor.New(shape...), tensor.New(shape...)
	for i := range a.Data {
		a.Data[i], b.Data[i], ones.Data[i] = float32(i%7)*0.1, -float32(i%5)*0.1, 1
	}
	srv.replay = tensor.Named{"server_noise": ones}
	// sites that (wrongly) report an ε: the server without noise reports none
	results := []federation.FitResult{{ClientID: 0, NumExamples: 8, Params: tensor.Named{ParamGlobal: a}, Metrics: map[string]float64{MetricLocal: 3}},
		{ClientID: 1, NumExamples: 4, Params: tensor.Named{ParamGlobal: b}}}
	if err := srv.Aggregate(0, results, nil); err != nil {
		t.Fatal(err)
	}
	for i, v := range plan.Global()[ParamGlobal].Data {
		if want := (a.Data[i] + b.Data[i]) / 2; v != want {
			t.Fatalf("global[%d] = %g, want the mean %g", i, v, want)
		}
	}
	if m := srv.RoundMetrics(); m != nil {
		t.Errorf("round metrics without noise: %v", m)
	}
}

// TestReplayOneBatch: a fixture's draws cover one batch per client; a
// second batch's Ω is refused, naming the batch.
func TestReplayOneBatch(t *testing.T) {
	used := 0
	src := &replaySource{draws: tensor.Named{"client0.omega": tensor.New(2)}, prefix: "client0.", used: &used}
	dst := make([]float32, 2)
	if err := src.Gaussian(dst, 1, "omega"); err != nil {
		t.Fatal(err)
	}
	if err := src.Gaussian(dst, 1, "omega"); err == nil || !strings.Contains(err.Error(), "client0.batch 2") {
		t.Errorf("second batch: %v", err)
	}
}
