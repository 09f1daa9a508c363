package dpfpl

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/robust"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/tensor"
)

func init() { methods.Register(Method{}) }

// Settings is the dpfpl config section (defaults: the authors' code and
// README; see the package doc).
type Settings struct {
	NCtx       int     `yaml:"n_ctx"`       // learned context tokens (16)
	Rank       int     `yaml:"rank"`        // rank r of the local factorisation (8)
	NormThresh float64 `yaml:"norm_thresh"` // clipping threshold C (10)
	// Epsilon is the privacy budget ε the noise is calibrated for (the
	// code's --noise; README default 0.4); 0 turns the mechanism off.
	Epsilon float64 `yaml:"epsilon"`
	Delta   float64 `yaml:"delta"` // δ (1e-5, fixed in the code)
	// CalibrationRounds is T in σ = √(T·log(1/δ))/ε: the rounds the budget
	// is meant to cover (the code's --round, 100).
	CalibrationRounds int     `yaml:"calibration_rounds"`
	InitStd           float64 `yaml:"init_std"` // σ of the N(0, σ²) init (0.02)
	// Factorization is the authors' --factorization: only "dpfpl"
	// (low-rank + residual) is implemented; their promptfl, fedotp, fedpgp
	// and dplora variants are refused, naming the key.
	Factorization string `yaml:"factorization"`
	// PerExampleDP (not the authors'; off by default) replaces their
	// mechanism by DP-SGD's: per-example clipping of the global gradient
	// and of gU and gV, and noise on all three on the site at every step,
	// so that the upload itself is private, against the coordinator too,
	// at the sensitivity C/B the noise is calibrated for.
	PerExampleDP bool `yaml:"per_example_dp"`
	// LR and LocalEpochs, when set, replace the run's optimizer.lr and
	// federation.local_epochs for this method (world-compare's tuned
	// recipe); 0 keeps the run's. The privacy ledger counts the steps and
	// rates these give.
	LR          float64 `yaml:"lr"`
	LocalEpochs int     `yaml:"local_epochs"`

	replay tensor.Named // recorded draws of a fixture (not a config key)
}

// Check implements config.Section.
func (s *Settings) Check(c *config.Checker) {
	c.AtLeast("n_ctx", s.NCtx, 1)
	c.AtMost("n_ctx", s.NCtx, 64)
	c.AtLeast("rank", s.Rank, 1)
	c.AtMost("rank", s.Rank, 64)
	if s.Rank > s.NCtx {
		c.Fail("rank", "%d exceeds n_ctx (%d): the factorisation's rank is at most the context length", s.Rank, s.NCtx)
	}
	c.Positive("norm_thresh", s.NormThresh)
	c.NonNegative("epsilon", s.Epsilon)
	c.Range("delta", s.Delta, 1e-300, 0.5)
	c.AtLeast("calibration_rounds", s.CalibrationRounds, 1)
	c.AtMost("calibration_rounds", s.CalibrationRounds, 1000000)
	c.NonNegative("init_std", s.InitStd)
	if err := checkFactorization(s.Factorization); err != nil {
		c.Fail("factorization", "%v", err)
	}
	c.NonNegative("lr", s.LR)
	c.AtLeast("local_epochs", s.LocalEpochs, 0)
	c.AtMost("local_epochs", s.LocalEpochs, config.MaxOwnLocalEpochs)
}

// train is the run's local training with this section's lr and local
// epochs in place of the run's where they are set.
func (s *Settings) train(run train.Options) train.Options { return run.Own("", s.LR, 0, s.LocalEpochs) }

// Factorization is the only factorisation of the authors' code that is
// implemented.
const Factorization = "dpfpl"

// checkFactorization refuses the authors' other factorisations (their
// --factorization promptfl, fedotp, fedpgp, dplora), which pfedmma does not
// implement, instead of running dpfpl under their name.
func checkFactorization(f string) error {
	if f == "" || f == Factorization {
		return nil
	}
	return fmt.Errorf("%q is not implemented (only %q, the low-rank factorisation plus residual; the authors' promptfl, fedotp, fedpgp and dplora variants are refused)", f, Factorization)
}

// Sigma is the noise multiplier σ of both mechanisms (0: no noise).
func (s *Settings) Sigma() float64 {
	if s.Epsilon <= 0 {
		return 0
	}
	return PaperSigma(s.Epsilon, s.Delta, 1, s.CalibrationRounds)
}

// noiseStd is the local noise's standard deviation s = σ·C/B.
func (s *Settings) noiseStd(batch int) float64 {
	return s.Sigma() * s.NormThresh / float64(max(batch, 1))
}

func (s *Settings) config(seed uint64, batch int) Config {
	return Config{NCtx: s.NCtx, Rank: s.Rank, ClipNorm: s.NormThresh, NoiseStd: s.noiseStd(batch), InitStd: s.InitStd, Seed: seed,
		PerExampleDP: s.PerExampleDP, DPBatch: max(batch, 1)}
}

func defaultSettings() *Settings {
	c := DefaultConfig()
	return &Settings{NCtx: c.NCtx, Rank: c.Rank, NormThresh: c.ClipNorm, Epsilon: 0.4, Delta: 1e-5, CalibrationRounds: 100, InitStd: c.InitStd,
		Factorization: Factorization}
}

// Method is DP-FPL for the methods registry.
type Method struct{}

// Info implements methods.Method.
func (Method) Info() methods.Info {
	return methods.Info{Name: "dpfpl",
		Trains: "a global and a local CoOp context; the local one's gradient rebuilt from a low-rank factorisation + residual, with local DP noise on the factors' gradients",
		Shares: "the global context, clipped but not noised on the site unless per_example_dp (the coordinator sees it in the clear); the server adds Gaussian noise to the uniform mean (global DP: against other sites and the published global context, not the coordinator); the local context stays on the site",
		Loader: methods.DasslLoader, // linhhtran/DP-FPL: Dassl's fed_train_loader_x
		Paper:  "Tran et al., Privacy-Preserving Personalized Federated Prompt Learning for Multimodal Large Language Models (ICLR 2025)"}
}

// DefaultConfig implements methods.Method.
func (Method) DefaultConfig() config.Section { return defaultSettings() }

// Depth implements methods.Method: the image encoder is frozen whole.
func (Method) Depth(config.Section, int) (int, error) { return methods.Features, nil }

// SurrogateGradient implements methods.SurrogateGradient.
func (Method) SurrogateGradient() string {
	return "the local context's gradient is rebuilt from its factors' (clipped, noised) gradients, and the global one is clipped"
}

// SmallSettings implements methods.SmallRun: 8 context tokens leave room
// for the class names in a small CLIP's 24-token prompts.
func (Method) SmallSettings(int) map[string]string {
	return map[string]string{"n_ctx": "8", "rank": "4"}
}

func settings(sec config.Section) (*Settings, error) {
	s, err := methods.Section[Settings]("dpfpl", sec)
	if err != nil {
		return nil, err
	}
	if err := s.config(0, 1).Validate(); err != nil {
		return nil, err
	}
	if !(s.Delta > 0 && s.Delta < 1) || s.CalibrationRounds < 1 || !(s.Epsilon >= 0) || math.IsInf(s.Epsilon, 0) {
		return nil, fmt.Errorf("dpfpl: epsilon %g, delta %g, calibration_rounds %d out of range", s.Epsilon, s.Delta, s.CalibrationRounds)
	}
	if err := checkFactorization(s.Factorization); err != nil {
		return nil, fmt.Errorf("dpfpl: factorization %w", err)
	}
	return s, nil
}

// clientState is a site's privacy bookkeeping: the local mechanism's
// applications so far (saved with the client's state), and the privacy
// spent it adds to the site's training metrics.
type clientState struct {
	c      *client.Client
	s      *Settings
	train  train.Options
	sigma  float64
	index  int // the client's position in the task (fixture draws)
	ledger Ledger
	lrs    []float64 // the current round's step learning rates
	draws  int       // fixture draws used
}

const (
	stepsKey   = "dpfpl/local_steps"
	factorsKey = "dpfpl/upload_factors" // [n+1]: n, then the n rounds' UploadFactor
)

// Build implements methods.Method.
//
// A round is the run's local training on each client (every batch:
// Step, then Privatize with draws from the client's generator), then the
// server's uniform mean of the global contexts plus ξ = −η·ν, ν ∼ N(0,
// (s/K)²) per value (η the round's learning rate, K the round's
// participants; the code's USERS, as every client takes part): for one
// local step per round this is the code's update of the global context
// with the noised mean gradient exactly (the code communicates after every
// batch). Each client reports the ε its examples have spent in its
// training metrics, the server the largest of the round's in its round
// metrics (see reference/dpfpl/README.md on the sensitivity).
//
// Every Gaussian release is counted (Ledger): gU and gV at every local step
// (two releases a step) and the server's noise once a round, at the
// sensitivity of the upload after the round's S local steps
// (UploadFactor); each at the code's stated per-example sensitivity C/B
// (dp_epsilon_local, dp_epsilon_global) and at the one its batch-mean
// clipping has, 2C (dp_epsilon_local_batch_clip,
// dp_epsilon_global_batch_clip), and both composed (dp_epsilon_total,
// dp_epsilon_total_batch_clip). The coordinator receives each upload
// without noise: against it the global context has no DP at all, unless
// per_example_dp runs DP-SGD on the site (three releases a step at C/B,
// the upload private against the coordinator too).
func (Method) Build(env *methods.Env, sec config.Section) (*methods.Plan, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	tr := s.train(env.Train)
	if s.Epsilon > 0 && tr.Optimizer != "" && tr.Optimizer != "sgd" {
		return nil, fmt.Errorf("dpfpl: optimizer %s with epsilon %g: the privacy accounting bounds SGD's updates only (set optimizer sgd or dpfpl.epsilon 0)", tr.Optimizer, s.Epsilon)
	}
	cfg := s.config(env.Seed, tr.Batch)
	index := map[int]int{}
	for i, c := range env.Task.Clients {
		index[c.ID] = i
	}
	return client.Build(env, &client.Spec{Name: "dpfpl", Placeholder: cfg.NCtx, Shared: federation.Names(ParamGlobal), Train: &tr,
		NewLearner: func(_ int, tokens []int) (client.Learner, error) {
			l, err := New(env.Model, tokens, cfg)
			if err != nil {
				return nil, err
			}
			return l, nil
		},
		Strategy: func(init tensor.Named) federation.Strategy {
			return &server{inner: &strategy.FedAvg{Shared: federation.Names(ParamGlobal), Uniform: true,
				Initial: tensor.Named{ParamGlobal: init[ParamGlobal].Clone()}, EvaluateGlobal: true},
				std: cfg.NoiseStd, lr: tr.Rate, seed: env.Seed, replay: s.replay}
		},
		Site: func(c *client.Client) (any, error) {
			return &clientState{c: c, index: index[c.Task.ID], s: s, train: tr, sigma: s.Sigma()}, nil
		}})
}

// AfterBackward implements client.AfterBackwarder: the local mechanism
// (clipping and noise) on the batch's gradients, recorded in the ledger.
func (st *clientState) AfterBackward(b train.Batch) error {
	l, err := st.c.Learner()
	if err != nil {
		return err
	}
	var src Source = RNGSource{RNG: b.RNG}
	if st.s.replay != nil {
		src = &replaySource{draws: st.s.replay, prefix: fmt.Sprintf("client%d.", st.index), used: &st.draws}
	}
	if err := l.(*Learner).Privatize(src); err != nil {
		return err
	}
	st.ledger.LocalSteps++
	st.lrs = append(st.lrs, st.train.Rate(b.Round, b.Epoch))
	return nil
}

// SaveExtra implements client.ExtraState: the ledger.
func (st *clientState) SaveExtra() (tensor.Named, error) { return saveLedger(st.ledger), nil }

// LoadExtra implements client.ExtraState.
func (st *clientState) LoadExtra(saved tensor.Named) error {
	l, err := loadLedger(saved)
	if err != nil {
		return fmt.Errorf("dpfpl client %d state: %w", st.c.Task.ID, err)
	}
	st.ledger = l
	return nil
}

// StartFit implements client.Reporter: a round's learning rates start
// empty.
func (st *clientState) StartFit() { st.lrs = st.lrs[:0] }

// Report implements client.Reporter: after the local training it records
// the round's UploadFactor in the site's ledger and reports the ε spent so
// far (Ledger.Epsilons).
func (st *clientState) Report(round int, m map[string]float64) error {
	if st.sigma <= 0 {
		return nil
	}
	// the momentum buffer carries earlier rounds' steps when it is kept
	// and there were any
	carried := !st.train.ResetOptimizer && st.ledger.LocalSteps > len(st.lrs)
	f := UploadFactor(st.lrs, st.train.Rate(round, 0), st.train.Momentum, carried)
	st.ledger.UploadFactors = append(st.ledger.UploadFactors, float64(float32(f))) // as saved
	st.ledger.PerExample = st.s.PerExampleDP
	eps, err := st.ledger.Epsilons(st.sigma, st.train.Batch, st.s.Delta)
	if err != nil {
		return err
	}
	maps.Copy(m, eps)
	return nil
}

// saveLedger is a site's ledger as state tensors.
func saveLedger(l Ledger) tensor.Named {
	f := make([]float32, 0, len(l.UploadFactors)+1)
	f = append(f, float32(len(l.UploadFactors)))
	for _, x := range l.UploadFactors {
		f = append(f, float32(x))
	}
	return tensor.Named{stepsKey: &tensor.Tensor{Shape: []int{1}, Data: []float32{float32(l.LocalSteps)}},
		factorsKey: &tensor.Tensor{Shape: []int{len(f)}, Data: f}}
}

// loadLedger reads saveLedger's tensors, naming the one that is missing or
// malformed.
func loadLedger(st tensor.Named) (Ledger, error) {
	whole := func(x float32) bool { return x >= 0 && x == float32(math.Trunc(float64(x))) }
	t, ok := st[stepsKey]
	if !ok || len(t.Data) != 1 || !whole(t.Data[0]) {
		return Ledger{}, fmt.Errorf("no %s count", stepsKey)
	}
	l := Ledger{LocalSteps: int(t.Data[0])}
	f, ok := st[factorsKey]
	if !ok || len(f.Data) == 0 || !whole(f.Data[0]) || int(f.Data[0]) != len(f.Data)-1 {
		return Ledger{}, fmt.Errorf("no %s (a count, then one upload factor per round)", factorsKey)
	}
	for _, x := range f.Data[1:] {
		if !(x >= 0) || math.IsInf(float64(x), 0) {
			return Ledger{}, fmt.Errorf("%s holds %v", factorsKey, x)
		}
		l.UploadFactors = append(l.UploadFactors, float64(x))
	}
	return l, nil
}

// server is the uniform mean of the global contexts plus the global
// mechanism's noise, drawn from PCG(seed, round) (nothing to save: a
// resumed round draws the same noise).
type server struct {
	inner  *strategy.FedAvg
	std    float64 // s: ν's standard deviation is s/K for K participants (gradient units)
	lr     func(round, epoch int) float64
	seed   uint64
	replay tensor.Named
	global tensor.Named
	// spent is the largest ε over the latest round's sites, per metric
	// (RoundMetrics).
	spent federation.Metrics
}

// Name implements federation.Strategy.
func (s *server) Name() string { return "dpfpl-mean+noise" }

// Init implements federation.Strategy.
func (s *server) Init(clients []federation.ClientInfo) error {
	if err := s.inner.Init(clients); err != nil {
		return err
	}
	s.global = s.inner.Global()
	return nil
}

func (s *server) send(out map[int]tensor.Named) map[int]tensor.Named {
	for id := range out {
		out[id] = s.global.Clone()
	}
	return out
}

// Configure implements federation.Strategy.
func (s *server) Configure(round int, selected []int) (map[int]tensor.Named, error) {
	out, err := s.inner.Configure(round, selected)
	return s.send(out), err
}

// ConfigureEvaluate implements federation.EvaluateConfigurer: every client
// scores the new global context with its own local one.
func (s *server) ConfigureEvaluate(round int, clients []int) (map[int]tensor.Named, error) {
	out, err := s.inner.ConfigureEvaluate(round, clients)
	return s.send(out), err
}

// Aggregate implements federation.Strategy.
func (s *server) Aggregate(round int, results []federation.FitResult, failures []federation.Failure) error {
	if err := s.inner.Aggregate(round, results, failures); err != nil {
		return err
	}
	s.spent = nil
	for _, r := range results {
		for _, k := range []string{MetricLocal, MetricGlobal, MetricLocalBatchClip, MetricGlobalBatchClip, MetricTotal, MetricTotalBatchClip} {
			if v, ok := r.Metrics[k]; ok {
				if s.spent == nil {
					s.spent = federation.Metrics{}
				}
				s.spent[k] = math.Max(s.spent[k], v)
			}
		}
	}
	g := s.inner.Global()
	if s.std > 0 {
		eta := s.lr(round, 0)
		t := g[ParamGlobal]
		nu := make([]float32, len(t.Data))
		if s.replay != nil {
			r, ok := s.replay["server_noise"]
			if !ok || len(r.Data) != len(nu) {
				return fmt.Errorf("dpfpl server round %d: the fixture has no server_noise of %d values", round, len(nu))
			}
			copy(nu, r.Data)
		} else {
			_ = RNGSource{RNG: rand.New(rand.NewPCG(s.seed, 0xd9f1<<32|uint64(round)))}.Gaussian(nu, s.std/float64(len(results)), "server_noise")
		}
		for i, v := range nu {
			t.Data[i] = float32(float64(t.Data[i]) - eta*float64(v))
		}
	}
	s.global = g
	return nil
}

// State implements federation.Strategy.
func (s *server) State() tensor.Named {
	st := tensor.Named{}
	for k, v := range s.global {
		st["global/"+k] = v.Clone()
	}
	return st
}

// LoadState implements federation.Strategy.
func (s *server) LoadState(st tensor.Named) error {
	if err := s.inner.LoadState(st); err != nil {
		return err
	}
	s.global = s.inner.Global()
	return nil
}

// Global returns the server's global context.
func (s *server) Global() tensor.Named { return s.global.Clone() }

// replaySource hands out a fixture's recorded draws in order:
// prefix+what, for one batch per client.
type replaySource struct {
	draws  tensor.Named
	prefix string
	used   *int
}

func (r *replaySource) Gaussian(dst []float32, _ float64, what string) error {
	if what == "omega" {
		*r.used++
		if *r.used > 1 {
			return fmt.Errorf("the fixture's draws cover one batch per client; %sbatch %d asked for", r.prefix, *r.used)
		}
	}
	t, ok := r.draws[r.prefix+what]
	if !ok || len(t.Data) != len(dst) {
		return fmt.Errorf("the fixture has no %s%s of %d values", r.prefix, what, len(dst))
	}
	copy(dst, t.Data)
	return nil
}

// Prepare implements client.Learner: the text features Logits scores
// against, computed once per evaluation.
func (l *Learner) Prepare() error {
	f, err := l.TextFeatures()
	l.evalTxt = append(l.evalTxt[:0], f...)
	return err
}

// Logits implements client.Learner: CLIP's cosine head on cached image
// features img [B, E] against Prepare's text features.
func (l *Learner) Logits(img []float32, B int) ([]float32, error) {
	return clip.Logits(img, l.evalTxt, B, l.C, l.E, l.LogitScale), nil
}

// Predictor implements methods.Method: the site's G + L.
func (Method) Predictor(pe methods.PredictEnv, sec config.Section, saved tensor.Named) (methods.Predictor, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	return predictor{pe: pe, cfg: s.config(0, 1), saved: saved}, nil
}

type predictor struct {
	pe    methods.PredictEnv
	cfg   Config
	saved tensor.Named
}

func (p predictor) Logits(pixels []float32, B int, classes []string) ([]float32, error) {
	m := p.pe.Model
	l, err := client.PredictLearner(p.pe, p.cfg.NCtx, classes, p.saved, func(tokens []int) (*Learner, error) {
		return New(m, tokens, p.cfg)
	})
	if err != nil {
		return nil, fmt.Errorf("dpfpl: saved site: %w", err)
	}
	if err := l.Prepare(); err != nil {
		return nil, err
	}
	return l.Logits(append([]float32(nil), m.EncodeImage(pixels, B)...), B)
}

// NoisyMean implements robust.NoisyMean: the server's mean is the global
// mechanism, so robust rules in its place are refused.
func (s *server) NoisyMean() bool { return s.std > 0 }

// RoundMetrics reports, after the latest aggregation
// (federation.RoundReporter, where the coordinator has it), the largest ε
// the round's sites report (each site's examples are in its own upload
// only, so each site accounts for itself; the federation spends the
// worst).
func (s *server) RoundMetrics() federation.Metrics {
	if s.std <= 0 || len(s.spent) == 0 {
		return nil
	}
	return maps.Clone(s.spent)
}

var (
	_ federation.RoundReporter = (*server)(nil)
	_ robust.NoisyMean         = (*server)(nil)
)
