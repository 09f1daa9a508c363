package fedpha

import (
	"fmt"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

func init() { methods.Register(Method{}) }

// noPosition says why class_token_position is refused: FedPHA's code has
// no position other than end.
const noPosition = "the FedPHA code (PMFLT model/FedPHA.py) builds only the local prompts for middle and front and fails on the undefined global and projected prompts (UnboundLocalError); only end is supported"

// Settings is the fedpha config section (defaults: PMFLT's fedpha.yaml; see
// the package doc).
type Settings struct {
	NCtx       int     `yaml:"n_ctx"`       // context tokens of each prompt (16)
	Ratio      float64 `yaml:"ratio"`       // kept fraction of the global prompt's singular directions (0.8)
	Alpha      float64 `yaml:"alpha"`       // push margin α (1)
	LambdaPull float64 `yaml:"lambda_pull"` // weight of the pull term (1)
	LambdaPush float64 `yaml:"lambda_push"` // weight of the push term (1)
	InitStd    float64 `yaml:"init_std"`    // σ of the contexts' N(0, σ²) init (0.02)
	// ClassTokenPosition is CoOp's class_token_position, accepted only as
	// end (see noPosition).
	ClassTokenPosition string `yaml:"class_token_position,omitempty"`
}

// Check implements config.Section.
func (s *Settings) Check(c *config.Checker) {
	if p := s.ClassTokenPosition; p != "" && p != prompt.PositionEnd {
		c.Fail("class_token_position", "%q: %s", p, noPosition)
	}
	c.AtLeast("n_ctx", s.NCtx, 1)
	c.AtMost("n_ctx", s.NCtx, 64)
	c.Range("ratio", s.Ratio, 0, 1)
	c.NonNegative("alpha", s.Alpha)
	c.NonNegative("lambda_pull", s.LambdaPull)
	c.NonNegative("lambda_push", s.LambdaPush)
	// a zero global prompt has no SVD derivative (the projection needs its
	// singular directions): the contexts start from a nonzero draw
	c.Positive("init_std", s.InitStd)
}

func (s *Settings) config(seed uint64) Config {
	return Config{NCtx: s.NCtx, Ratio: s.Ratio, Alpha: s.Alpha, LambdaPull: s.LambdaPull, LambdaPush: s.LambdaPush,
		InitStd: s.InitStd, Seed: seed}
}

func fromConfig(c Config) *Settings {
	return &Settings{NCtx: c.NCtx, Ratio: c.Ratio, Alpha: c.Alpha, LambdaPull: c.LambdaPull, LambdaPush: c.LambdaPush,
		InitStd: c.InitStd}
}

// Method is FedPHA for the methods registry.
type Method struct{}

// Info implements methods.Method.
func (Method) Info() methods.Info {
	return methods.Info{Name: "fedpha", Trains: "a global and a private local CoOp prompt, the local one also projected by the SVD of the global one",
		Shares: "the global prompt only (FedAvg, weights n_i)",
		Loader: methods.TorchLoader, // Yuqin-G/PMFLT: dm_federated.build_data_loader, no drop_last
		Paper:  "Fang et al., Federated Prompt Learning for Heterogeneous Client Adaptation (ICML 2025)"}
}

// DefaultConfig implements methods.Method.
func (Method) DefaultConfig() config.Section { return fromConfig(DefaultConfig()) }

// Depth implements methods.Method: the image encoder is frozen whole.
func (Method) Depth(config.Section, int) (int, error) { return methods.Features, nil }

func settings(sec config.Section) (*Settings, error) {
	s, err := methods.Section[Settings]("fedpha", sec)
	if err != nil {
		return nil, err
	}
	return s, s.config(0).Validate()
}

// Build implements methods.Method: clients upload the global context, the
// server averages it (weights n_i over the round's clients), and each
// client continues from [global, its own local context]; the local context
// never leaves the site. The global model scores with the global prompt
// alone (the reference's forward_global).
func (Method) Build(env *methods.Env, sec config.Section) (*methods.Plan, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	plan, err := client.Build(env, spec(env, s.config(env.Seed)))
	if err != nil {
		return nil, err
	}
	if len(plan.Clients) == 0 || plan.Global == nil {
		return plan, nil
	}
	if c0, ok := plan.Clients[0].(*client.Client); ok {
		spaces := c0.Spaces
		plan.GlobalScorer = func() (eval.Scorer, error) {
			return &globalScorer{spaces: spaces, global: plan.Global(), ready: map[int]bool{}}, nil
		}
	}
	return plan, nil
}

func spec(env *methods.Env, cfg Config) *client.Spec {
	return &client.Spec{Name: "fedpha", Placeholder: cfg.NCtx, Shared: federation.Names(ParamGlobal),
		NewLearner: func(_ int, tokens []int) (client.Learner, error) { return New(env.Model, tokens, cfg) }}
}

// globalScorer scores with the server's global context alone.
type globalScorer struct {
	spaces *client.Spaces
	global tensor.Named
	ready  map[int]bool
}

func (g *globalScorer) Logits(space int, img []float32, B int) ([]float32, error) {
	pl, err := g.spaces.Get(space)
	if err != nil {
		return nil, err
	}
	l, ok := pl.(*Learner)
	if !ok {
		return nil, fmt.Errorf("fedpha: learner is a %T", pl)
	}
	if !g.ready[space] {
		src, ok := g.global[ParamGlobal]
		if !ok || len(src.Data) != len(l.global.Data) {
			return nil, fmt.Errorf("fedpha: the server holds no %q of %d values", ParamGlobal, len(l.global.Data))
		}
		copy(l.global.Data, src.Data)
		if err := l.PrepareGlobal(); err != nil {
			return nil, err
		}
		g.ready[space] = true
	}
	return l.Logits(img, B)
}

// Predictor implements methods.Method: the site's personal model, its
// local prompt on the frozen model.
func (Method) Predictor(pe methods.PredictEnv, sec config.Section, saved tensor.Named) (methods.Predictor, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	for _, name := range []string{ParamGlobal, ParamLocal} {
		if _, ok := saved[name]; !ok {
			return nil, fmt.Errorf("fedpha: saved site lacks %q", name)
		}
	}
	return predictor{pe: pe, cfg: s.config(0), saved: saved}, nil
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
		return nil, fmt.Errorf("fedpha: %w", err)
	}
	if err := l.Prepare(); err != nil {
		return nil, err
	}
	return l.Logits(m.EncodeImage(pixels, B), B)
}
