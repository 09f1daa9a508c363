package plot

import (
	"fmt"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/fedotp"
	"github.com/pfedmma/pfedmma/tensor"
)

func init() { methods.Register(Method{}) }

// Settings is the plot config section (defaults: the authors' code and
// scripts; see the package doc).
type Settings struct {
	NCtx     int     `yaml:"n_ctx"`     // context tokens per prompt (16)
	NPrompts int     `yaml:"n_prompts"` // prompts per class, N (4)
	Eps      float64 `yaml:"eps"`       // Sinkhorn's entropic regularisation ε > 0 (0.1)
	Thresh   float64 `yaml:"thresh"`    // Sinkhorn's stopping threshold (0.01)
	MaxIter  int     `yaml:"max_iter"`  // Sinkhorn iterations at most (100)
	InitStd  float64 `yaml:"init_std"`  // σ of the contexts' N(0, σ²) init (0.02)
	// GlobalLogit adds their ImageNet branch: the global image token
	// against the mean of the N prompts (their code does it on ImageNet
	// only; off by default).
	GlobalLogit bool `yaml:"global_logit"`
	// LR and LocalEpochs, when set, replace the run's optimizer.lr and
	// federation.local_epochs for this method; 0 keeps the run's.
	LR          float64 `yaml:"lr"`
	LocalEpochs int     `yaml:"local_epochs"`
}

// Check implements config.Section.
func (s *Settings) Check(c *config.Checker) {
	c.AtLeast("n_ctx", s.NCtx, 1)
	c.AtMost("n_ctx", s.NCtx, 64)
	c.AtLeast("n_prompts", s.NPrompts, 1)
	c.AtMost("n_prompts", s.NPrompts, 16)
	c.Positive("eps", s.Eps)
	c.Positive("thresh", s.Thresh)
	c.AtLeast("max_iter", s.MaxIter, 1)
	c.AtMost("max_iter", s.MaxIter, 100000)
	c.NonNegative("init_std", s.InitStd)
	c.NonNegative("lr", s.LR)
	c.AtLeast("local_epochs", s.LocalEpochs, 0)
	c.AtMost("local_epochs", s.LocalEpochs, config.MaxOwnLocalEpochs)
}

func (s *Settings) config(seed uint64) Config {
	return Config{NCtx: s.NCtx, N: s.NPrompts, Eps: s.Eps, Thresh: s.Thresh, MaxIter: s.MaxIter,
		InitStd: s.InitStd, Seed: seed, GlobalLogit: s.GlobalLogit}
}

func fromConfig(c Config) *Settings {
	return &Settings{NCtx: c.NCtx, NPrompts: c.N, Eps: c.Eps, Thresh: c.Thresh, MaxIter: c.MaxIter,
		InitStd: c.InitStd, GlobalLogit: c.GlobalLogit}
}

// Method is PLOT for the methods registry.
type Method struct{}

// Info implements methods.Method.
func (Method) Info() methods.Info {
	return methods.Info{Name: "plot", Trains: "N CoOp prompts per class matched to the image's local features by optimal transport",
		Shares: "all N prompts (FedAvg, weights n_i)",
		Paper:  "Chen et al., PLOT: Prompt Learning with Optimal Transport for Vision-Language Models (ICLR 2023)",
		Loader: methods.DasslLoader, // CHENGY12/PLOT plot-coop: a Dassl TrainerX (Dassl.pytorch)
	}
}

// DefaultConfig implements methods.Method.
func (Method) DefaultConfig() config.Section { return fromConfig(DefaultConfig()) }

// Depth implements methods.Method: every token's features are cached.
func (Method) Depth(config.Section, int) (int, error) { return methods.TokenFeatures, nil }

// ResNetTokens implements methods.ResNetTokens: on a ResNet CLIP the local
// features are the attention pool's outputs at every spatial position, as
// the authors' modified CLIP computes them (their runs use RN50).
func (Method) ResNetTokens() string {
	return "CHENGY12/PLOT plot-coop/clip/model.py AttentionPool2d (every token a query)"
}

func settings(sec config.Section) (*Settings, error) {
	s, err := methods.Section[Settings]("plot", sec)
	if err != nil {
		return nil, err
	}
	return s, s.config(0).Validate()
}

// Build implements methods.Method: every client trains its N contexts on
// its token features; the server averages all of them (FedAvg).
func (Method) Build(env *methods.Env, sec config.Section) (*methods.Plan, error) {
	sp, err := spec(env, sec)
	if err != nil {
		return nil, err
	}
	return client.Build(env, sp)
}

// spec is PLOT's client.Spec on env with the settings sec.
func spec(env *methods.Env, sec config.Section) (*client.Spec, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	cfg := s.config(env.Seed)
	opts := env.Train.Own("", s.LR, 0, s.LocalEpochs)
	return &client.Spec{Name: "plot", Placeholder: cfg.NCtx, Shared: federation.Names(ParamCtx), Train: &opts,
		NewLearner: func(_ int, tokens []int) (client.Learner, error) {
			l, err := New(env.Model, tokens, cfg)
			if err != nil {
				return nil, err
			}
			return spaceLearner{l}, nil
		}}, nil
}

// spaceLearner adapts the learner to the client: Prepare computes the text
// features once per evaluation, Logits reuses them.
type spaceLearner struct{ *Learner }

func (s spaceLearner) Step(img []float32, labels []int) (float64, map[string]float64, []float32, error) {
	loss, logits, err := s.Learner.Step(img, labels)
	return loss, nil, logits, err
}

func (s spaceLearner) Prepare() error { return s.textForward(false) }

func (s spaceLearner) Logits(img []float32, B int) ([]float32, error) {
	if B < 1 {
		return nil, fmt.Errorf("plot: empty batch")
	}
	return s.headForward(img, B)
}

// Predictor implements methods.Method: the site's prompts and the OT head
// on the image's token features.
func (Method) Predictor(pe methods.PredictEnv, sec config.Section, saved tensor.Named) (methods.Predictor, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	cfg := s.config(0)
	return fedotp.TokenPredictor[*Learner]{PE: pe, NCtx: cfg.NCtx, Saved: saved,
		New: func(tokens []int) (*Learner, error) { return New(pe.Model, tokens, cfg) }}, nil
}

// SmallSettings implements methods.SmallRun: 8 context tokens leave room
// for the class names in a small CLIP's 24-token prompts.
func (Method) SmallSettings(int) map[string]string { return map[string]string{"n_ctx": "8"} }
