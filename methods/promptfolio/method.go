package promptfolio

import (
	"fmt"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

func init() { methods.Register(Method{}) }

// noPosition says why class_token_position is refused: PromptFolio's code has
// no position other than end.
const noPosition = "the authors' PromptFolio code (PanBikang/PromptFolio trainers/PromptFolio.py) builds only the first n_cls of its num_prompt·n_cls prompt rows for middle and front, so the local prompt's text features are empty and the mix fails; only end is supported"

// Settings is the promptfolio config section (defaults: the code's
// argparse; see the package doc).
type Settings struct {
	// NCtx is the number of context tokens of each prompt (8).
	NCtx int `yaml:"n_ctx"`
	// Theta is the portfolio weight θ of the local prompt's text features
	// in [0, 1] (the code's --frac_p, 0.4): 0 is PromptFL, 1 is local CoOp.
	Theta float64 `yaml:"theta"`
	// InitStd is the standard deviation of the contexts' N(0, σ²) init (0.02).
	InitStd float64 `yaml:"init_std"`
	// ClassTokenPosition is CoOp's class_token_position, accepted only as
	// end (see noPosition).
	ClassTokenPosition string `yaml:"class_token_position,omitempty"`
	// LR, when set, replaces the run's optimizer.lr for this method; 0
	// keeps the run's.
	LR float64 `yaml:"lr"`
}

// Check implements config.Section.
func (s *Settings) Check(c *config.Checker) {
	if p := s.ClassTokenPosition; p != "" && p != prompt.PositionEnd {
		c.Fail("class_token_position", "%q: %s", p, noPosition)
	}
	c.AtLeast("n_ctx", s.NCtx, 1)
	c.AtMost("n_ctx", s.NCtx, 64)
	c.Range("theta", s.Theta, 0, 1)
	c.NonNegative("init_std", s.InitStd)
	c.NonNegative("lr", s.LR)
}

// train returns the run's local-training settings with this section's lr
// where it is set.
func (s *Settings) train(run train.Options) train.Options {
	return run.Own("", s.LR, 0, 0)
}

func (s *Settings) config(seed uint64) Config {
	return Config{NCtx: s.NCtx, Theta: s.Theta, InitStd: s.InitStd, Seed: seed}
}

func fromConfig(c Config) *Settings {
	return &Settings{NCtx: c.NCtx, Theta: c.Theta, InitStd: c.InitStd}
}

// Method is PromptFolio for the methods registry.
type Method struct{}

// Info implements methods.Method.
func (Method) Info() methods.Info {
	return methods.Info{Name: "promptfolio", Trains: "a global and a local CoOp prompt whose text features are mixed by θ",
		Shares: "the global prompt only (FedAvg over the round's clients, weights n_i)",
		Loader: methods.DasslLoader, // PanBikang/PromptFolio: Dassl's fed_train_loader_x
		Paper:  "Pan et al., Federated Learning from Vision-Language Foundation Models: Theoretical Analysis and Method (NeurIPS 2024)"}
}

// DefaultConfig implements methods.Method.
func (Method) DefaultConfig() config.Section { return fromConfig(DefaultConfig()) }

// BenchSettings implements methods.Benchmarked: the benchmark's prompt rows
// hold 16 placeholders, as every other prompt method's (the default is 8).
func (Method) BenchSettings(sec config.Section) {
	if s, ok := sec.(*Settings); ok {
		s.NCtx = 16
	}
}

// Depth implements methods.Method: the image encoder is frozen whole.
func (Method) Depth(config.Section, int) (int, error) { return methods.Features, nil }

func settings(sec config.Section) (*Settings, error) {
	s, err := methods.Section[Settings]("promptfolio", sec)
	if err != nil {
		return nil, err
	}
	return s, s.config(0).Validate()
}

// Build implements methods.Method: clients upload prompt 0, the server
// averages it (weights n_i over the clients of the round), and each client
// continues from [global; its own prompt 1]. Prompt 1 never leaves the
// site.
func (Method) Build(env *methods.Env, sec config.Section) (*methods.Plan, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	sp := spec(env, s.config(env.Seed))
	opts := s.train(env.Train)
	sp.Train = &opts
	return client.Build(env, sp)
}

func spec(env *methods.Env, cfg Config) *client.Spec {
	return &client.Spec{Name: "promptfolio", Placeholder: cfg.NCtx, Shared: federation.Names(ParamCtx),
		NewLearner: func(_ int, tokens []int) (client.Learner, error) { return New(env.Model, tokens, cfg) },
		Strategy: func(init tensor.Named) federation.Strategy {
			g, _ := GlobalPart(init) // shapes checked by New
			return &strategy.FedAvg{Shared: federation.Names(ParamCtx), Initial: g}
		},
		Site: func(c *client.Client) (any, error) { return site{c}, nil }}
}

// site uploads the client's prompt 0 and installs the server's global
// prompt as its prompt 0; its prompt 1 stays as trained.
type site struct{ c *client.Client }

// Upload implements client.Uploader.
func (s site) Upload() tensor.Named {
	g, _ := GlobalPart(s.c.P)
	return g
}

// Receive implements client.Receiver.
func (s site) Receive(in tensor.Named) error {
	c := s.c
	for name := range in {
		if name != ParamCtx {
			return fmt.Errorf("promptfolio client %d: received unexpected tensor %q", c.Task.ID, name)
		}
	}
	if len(in) == 0 {
		return nil
	}
	next, err := WithGlobal(c.P, in)
	if err != nil {
		return fmt.Errorf("promptfolio client %d: %w", c.Task.ID, err)
	}
	copy(c.P[ParamCtx].Data, next[ParamCtx].Data)
	return nil
}

// Predictor implements methods.Method: the site's two prompts, mixed by θ,
// on the frozen model.
func (Method) Predictor(pe methods.PredictEnv, sec config.Section, saved tensor.Named) (methods.Predictor, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	if _, ok := saved[ParamCtx]; !ok {
		return nil, fmt.Errorf("promptfolio: saved site lacks %q", ParamCtx)
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
		return nil, fmt.Errorf("promptfolio: %w", err)
	}
	if err := l.Prepare(); err != nil {
		return nil, err
	}
	return l.Logits(m.EncodeImage(pixels, B), B)
}
