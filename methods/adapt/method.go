// Package adapt is ADAPT (FederAted Domain-Aware Prompt Tuning; "Learning
// to Prompt Your Domain for Federated Vision-Language Models", specs/adapt.md):
// one CoOp text prompt per domain, trained only by that domain's clients and
// relayed (not averaged) to the others, n visual prompt tokens shared by
// every client (averaged), and a parameter-free domain weighting that mixes
// the domains' text features per image.
//
// Per step, for cached prefixes x0 [B, T, Dv] (ln_pre output, depth 1):
//
//	f_V, q, k = image encoder on [cls, v_1 … v_n, patches]          (clip.PromptedVision)
//	a_i       = ⟨q̂_cls, k̂_i⟩ / τ_d,  w = softmax(a)                [B, n]
//	u^i_c     = F_T(P_T^i, class c) / ‖·‖                           [n, C, E]
//	f_T(x, c) = Σ_i w_i(x) · u^i_c   (→ AdaLN when enabled)          [B, C, E]
//	logits    = s · cos(f_V, f_T(x, ·))                              [B, C]
//	loss      = CE(logits, y) + λ · CE(a, own domain)
//
// The gradient reaches the client's own text prompt (through the frozen text
// encoder), the visual prompts (through every image block, the head and the
// weighting's q/k projections) and the AdaLN weights. The other domains'
// prompts are constants, moved by EMA toward the latest relayed copies
// before every local step: t ← α·t + (1−α)·t_received, α = ema (0.99).
//
// Server: strategy.Relay — text prompts relayed by client, visual prompts
// and AdaLN averaged uniformly. The optimiser is ADAPT's own AdamW
// (lr 5e-4, β 0.9/0.999, weight decay 0.01, constant rate) unless
// `adapt.optimizer: run` selects the run's optimizer section.
//
// # Decisions (the spec's [decide]s and the repository's own)
//
//   - Visual prompts: inserted after [cls] into the cached input of block 1,
//     i.e. after ln_pre (they do not pass through ln_pre, which only
//     reparametrises a free vector) and without positional embedding;
//     drawn N(0, visual_init_std²), 0.02 like the text prompts.
//   - Domain weighting: q_cls and k_i are the last block's frozen q and k
//     projections of ln_1(x) (its input), over all heads (width Dv), each
//     L2-normalised, so ⟨q̂, k̂⟩/τ_d with τ_d = 0.1 lies in [−10, 10].
//   - Mixing: the per-domain text features are L2-normalised before the
//     weighted sum (each domain's classifier counts by its weight, not by
//     its feature norm); the cosine head normalises the mix again.
//   - Domain loss: CE(a, i) on the same scores, pushing domain i's images'
//     [cls] query toward visual prompt i; λ = 1.
//   - AdaLN (adaln: true; off by default): adaln_layers (3) DiT-style layers
//     applied to the mixed text features of each (image, class) and added
//     residually, h ← h + LN(h)⊙γ(x) + β(x) with [γ|β] = W·f̂_V + b, LN
//     without affine parameters, W and b zero-initialised (identity at
//     start), averaged by the server like the visual prompts.
//   - Several clients per domain (domains protocol with clients_per_domain
//     > 1): prompts stay per domain. n is the number of distinct domains
//     among the task's clients (sorted by dataset domain index: the
//     held-out domain of a leave-one-domain-out task gets no prompt); the
//     clients of a domain all train its prompt, and at the start of each
//     round a client sets its own domain's prompt to the uniform mean of
//     its copy and the relayed copies of the same domain's other clients
//     (FedAvg within the domain), and the received copy of every other
//     domain is the mean of that domain's clients' relayed copies. With one
//     client per domain this is exactly the paper's relay.
//   - Before a domain's prompt was ever relayed (round 0) the external
//     copies stay at their common initial value (no EMA target).
//   - Evaluation of a site uses its own parameters: its prompt, its EMA'd
//     external copies, its visual prompts after local training. The global
//     model (Plan.Global, unseen domains) is the averaged visual prompts and
//     AdaLN with every domain's relayed prompt (mean over its clients).
//
// # Reference-fixture contract
//
// `pfedmma step --method adapt` and `pfedmma round --method adapt` work
// through Method.Step, Method.SettingsFrom and Method.FixtureRound
// (fixture.go documents the inputs and outputs): the step is one local
// step of the production Client and Learner for the client's own domain
// ("domain" from the metadata, `--set domain=i`, or a one-value tensor),
// with optional EMA targets ema_target.text_prompt.<j>, and step1 after
// one step of the section's optimizer (AdamW); the round is one round of
// the production plan (Relay, Coordinator, Sites) over client<i>.images,
// client<i>.labels and client<i>.domain. ADAPT has no public code:
// testdata/adapt holds fixtures of an independent float64 PyTorch ADAPT
// written from the paper, the spec and these decisions, which
// external_test.go checks through the production client and rounds.
package adapt

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tensor"
)

func init() { methods.Register(Method{}) }

// Optimizer choices of the section.
const (
	// OptimizerRun uses the run's optimizer section.
	OptimizerRun = "run"
)

// Settings is the adapt config section (defaults: the paper's).
type Settings struct {
	// NCtx is the text prompt length m (16).
	NCtx int `yaml:"n_ctx"`
	// InitStd and VisualInitStd are the std of the text and visual prompts'
	// normal init (0.02 each).
	InitStd       float64 `yaml:"init_std"`
	VisualInitStd float64 `yaml:"visual_init_std"`
	// Tau is τ_d of the domain weighting (0.1).
	Tau float64 `yaml:"tau"`
	// Lambda weighs the domain loss (1).
	Lambda float64 `yaml:"lambda"`
	// EMA is α of the external prompts' momentum update (0.99).
	EMA float64 `yaml:"ema"`
	// AdaLN turns on the text-feature conditioning (false), with
	// AdaLNLayers layers (3).
	AdaLN       bool `yaml:"adaln"`
	AdaLNLayers int  `yaml:"adaln_layers"`
	// Optimizer is "adamw" (ADAPT's, with LR and WeightDecay), "sgd" (with
	// the run's momentum) or "run" (the run's optimizer section as is).
	Optimizer   string  `yaml:"optimizer"`
	LR          float64 `yaml:"lr"`
	WeightDecay float64 `yaml:"weight_decay"`
}

// Check implements config.Section.
func (s *Settings) Check(c *config.Checker) {
	c.AtLeast("n_ctx", s.NCtx, 1)
	c.AtMost("n_ctx", s.NCtx, 64)
	c.NonNegative("init_std", s.InitStd)
	c.NonNegative("visual_init_std", s.VisualInitStd)
	c.Positive("tau", s.Tau)
	c.NonNegative("lambda", s.Lambda)
	c.Range("ema", s.EMA, 0, 1)
	c.AtLeast("adaln_layers", s.AdaLNLayers, 1)
	c.AtMost("adaln_layers", s.AdaLNLayers, 64)
	c.OneOf("optimizer", s.Optimizer, "adamw", "sgd", OptimizerRun)
	if s.Optimizer != OptimizerRun {
		c.Positive("lr", s.LR)
		c.NonNegative("weight_decay", s.WeightDecay)
	}
}

// DefaultSettings returns the paper's settings.
func DefaultSettings() *Settings {
	return &Settings{NCtx: 16, InitStd: 0.02, VisualInitStd: 0.02, Tau: 0.1, Lambda: 1, EMA: 0.99,
		AdaLNLayers: 3, Optimizer: "adamw", LR: 5e-4, WeightDecay: 0.01}
}

func (s *Settings) config(domains int, seed uint64) Config {
	return Config{Domains: domains, NCtx: s.NCtx, InitStd: s.InitStd, VisualStd: s.VisualInitStd, Tau: s.Tau,
		Lambda: s.Lambda, AdaLN: s.AdaLN, AdaLNLayers: s.AdaLNLayers, Seed: seed}
}

// trainOptions applies the section's optimizer to the run's options.
func (s *Settings) trainOptions(run train.Options) train.Options {
	if s.Optimizer == OptimizerRun {
		return run
	}
	o := run
	o.Optimizer, o.LR, o.WD, o.Schedule = s.Optimizer, s.LR, s.WeightDecay, nil
	return o
}

// Method is ADAPT for the methods registry.
type Method struct{}

// Info implements methods.Method.
func (Method) Info() methods.Info {
	return methods.Info{Name: "adapt",
		Trains: "its domain's CoOp text prompt, n visual prompt tokens (and optional AdaLN) on frozen CLIP",
		Shares: "text prompts relayed to every client (EMA-merged), visual prompts and AdaLN averaged",
		Loader: methods.TorchLoader, // no authors' code: PyTorch's default, every example trains
		Paper:  "Learning to Prompt Your Domain for Federated Vision-Language Models (ADAPT)"}
}

// DefaultConfig implements methods.Method.
func (Method) DefaultConfig() config.Section { return DefaultSettings() }

// Depth implements methods.Method: the whole image encoder runs per step
// (the visual prompts enter before block 1).
func (Method) Depth(config.Section, int) (int, error) { return 1, nil }

func settings(sec config.Section) (*Settings, error) {
	return methods.Section[Settings]("adapt", sec)
}

// Domains returns the distinct dataset domains of a task's clients, sorted:
// ADAPT's domain i is Domains(task)[i].
func Domains(t *protocol.Task) []int {
	var out []int
	for _, c := range t.Clients {
		if !slices.Contains(out, c.Domain) {
			out = append(out, c.Domain)
		}
	}
	slices.Sort(out)
	return out
}

// shared is what the clients of one Build share: the learners by label
// space (used one client at a time).
type shared struct {
	env    *methods.Env
	cfg    Config
	ema    float64
	spaces map[int]*Learner
}

func (s *shared) learner(space int) (*Learner, error) {
	if l, ok := s.spaces[space]; ok {
		return l, nil
	}
	tokens, err := s.env.ClassPromptTokens(space, client.Placeholder(s.cfg.NCtx))
	if err != nil {
		return nil, err
	}
	l, err := NewLearner(s.env.Model, tokens, s.cfg)
	if err != nil {
		return nil, err
	}
	s.spaces[space] = l
	return l, nil
}

// Averaged selects the tensors the server averages (visual prompts, AdaLN).
var Averaged = federation.Prefix(ParamVisual, AdaLNPrefix)

// Relayed selects the tensors the server relays (text prompts).
var Relayed = federation.Prefix(TextPrefix)

// Build implements methods.Method.
func (Method) Build(env *methods.Env, sec config.Section) (*methods.Plan, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	if env.Start != 1 {
		return nil, fmt.Errorf("adapt: needs the cached prefixes before block 1, the run caches depth %d", env.Start)
	}
	if len(env.Task.Clients) == 0 {
		return nil, fmt.Errorf("adapt: the task has no clients")
	}
	doms := Domains(env.Task)
	cfg := s.config(len(doms), env.Seed)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sh := &shared{env: env, cfg: cfg, ema: s.EMA, spaces: map[int]*Learner{}}
	var init tensor.Named // the initial parameters (Init, then Strategy's)
	opts := s.trainOptions(env.Train)
	spec := &client.Spec{Name: "adapt", Input: client.Prefixes, Placeholder: cfg.NCtx, Shared: Averaged, Train: &opts,
		Init: func() (tensor.Named, error) {
			first, err := sh.learner(env.Task.Clients[0].TrainSpace)
			if err != nil {
				return nil, err
			}
			init = InitParams(cfg, first.Dt, first.Dv, first.E)
			return init, nil
		},
		NewLearner: func(space int, _ []int) (client.Learner, error) {
			l, err := sh.learner(space)
			if err != nil {
				return nil, err
			}
			return &clientLearner{l: l, p: zerosLike(init), g: zerosLike(init)}, nil
		},
		Strategy: func(p tensor.Named) federation.Strategy {
			init = p // with env.Init installed
			avg := tensor.Named{}
			for name, t := range p {
				if Averaged(name) {
					avg[name] = t.Clone()
				}
			}
			return &strategy.Relay{Averaged: Averaged, Relayed: Relayed, Initial: avg}
		},
		Site: func(c *client.Client) (any, error) {
			return &site{c: c, ema: s.EMA, Domain: slices.Index(doms, c.Task.Domain)}, nil
		}}
	plan, err := client.Build(env, spec)
	if err != nil {
		return nil, err
	}
	relay := plan.Strategy.(*strategy.Relay)
	plan.Uploads = map[string][]int{}
	for name, t := range init {
		if Relayed(name) {
			// a site uploads its domain's text prompt, relayed to the others
			plan.Uploads[name] = slices.Clone(t.Shape)
		}
	}
	plan.Global = func() tensor.Named { return GlobalModel(relay.State(), init) }
	// the global model mixes every domain's prompt by the image's domain
	// weights: how ADAPT scores an unseen domain
	plan.GlobalScorer = func() (eval.Scorer, error) {
		return &Scorer{Learner: sh.learner, P: GlobalModel(relay.State(), init)}, nil
	}
	return plan, nil
}

// GlobalModel assembles the global model from a Relay's State: the averaged
// tensors, and each domain's text prompt as the mean of its clients'
// relayed copies (the initial prompt of a domain never relayed).
func GlobalModel(relayState, init tensor.Named) tensor.Named {
	out := init.Clone()
	sums := map[string][]*tensor.Tensor{}
	for k, v := range relayState {
		if name, ok := strings.CutPrefix(k, "global/"); ok {
			out[name] = v.Clone()
			continue
		}
		if rest, ok := strings.CutPrefix(k, strategy.RelayPrefix); ok {
			if _, name, found := strings.Cut(rest, "/"); found && Relayed(name) {
				sums[name] = append(sums[name], v)
			}
		}
	}
	for name, ts := range sums {
		out[name] = meanOf(ts)
	}
	return out
}

// meanOf is the uniform mean of equal-shape tensors (float64 accumulation).
func meanOf(ts []*tensor.Tensor) *tensor.Tensor {
	out := tensor.New(ts[0].Shape...)
	acc := make([]float64, len(out.Data))
	for _, t := range ts {
		for i, v := range t.Data {
			acc[i] += float64(v)
		}
	}
	for i, v := range acc {
		out.Data[i] = float32(v / float64(len(ts)))
	}
	return out
}

func zerosLike(p tensor.Named) tensor.Named {
	out := tensor.Named{}
	for k, v := range p {
		out[k] = tensor.New(v.Shape...)
	}
	return out
}

// Predictor implements methods.Method: a site's (or the global) parameters
// on the frozen model; the number of domains is read from the saved text
// prompts.
func (Method) Predictor(pe methods.PredictEnv, sec config.Section, saved tensor.Named) (methods.Predictor, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	n := 0
	for {
		if _, ok := saved[TextName(n)]; !ok {
			break
		}
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("adapt: saved parameters hold no %q", TextName(0))
	}
	return &predictor{pe: pe, cfg: s.config(n, 0), P: saved}, nil
}

type predictor struct {
	pe  methods.PredictEnv
	cfg Config
	P   tensor.Named
	x0  []float32
}

func (p *predictor) Logits(pixels []float32, B int, classes []string) ([]float32, error) {
	m := p.pe.Model
	tokens, err := p.pe.ClassPromptTokens(classes, client.Placeholder(p.cfg.NCtx))
	if err != nil {
		return nil, err
	}
	l, err := NewLearner(m, tokens, p.cfg)
	if err != nil {
		return nil, err
	}
	if _, err := l.TextFeatures(p.P); err != nil {
		return nil, err
	}
	p.x0 = clip.ImagePrefix(m, 1, pixels, B, p.x0)
	lg, _, err := l.Logits(p.P, p.x0, B)
	if err != nil {
		return nil, err
	}
	return append([]float32(nil), lg...), nil
}

// SmallSettings implements methods.SmallRun: 8 context tokens leave room
// for the class names in a small CLIP's 24-token prompts.
func (Method) SmallSettings(int) map[string]string { return map[string]string{"n_ctx": "8"} }
