package fedpgp

import (
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

func init() { methods.Register(Method{}) }

// Settings is the fedpgp config section (defaults: the authors' run
// scripts; see the package doc).
type Settings struct {
	NCtx       int     `yaml:"n_ctx"`      // learned context tokens (16)
	Bottleneck int     `yaml:"bottleneck"` // rank b of the personal U·V (8)
	NumPrompt  int     `yaml:"num_prompt"` // N prompts (1)
	Mu         float64 `yaml:"mu"`         // weight μ of the contrastive term (0.5)
	Temp       float64 `yaml:"temp"`       // temperature τ of the contrastive term (0.5)
	InitStd    float64 `yaml:"init_std"`   // σ of the N(0, σ²) init (0.02)
	// ClassTokenPosition is CoOp's class_token_position of the learned
	// prompts: end (default), middle or front.
	ClassTokenPosition string `yaml:"class_token_position"`
}

// Check implements config.Section.
func (s *Settings) Check(c *config.Checker) {
	c.AtLeast("n_ctx", s.NCtx, 1)
	c.AtMost("n_ctx", s.NCtx, 64)
	c.AtLeast("bottleneck", s.Bottleneck, 1)
	c.AtMost("bottleneck", s.Bottleneck, 4096)
	c.AtLeast("num_prompt", s.NumPrompt, 1)
	c.AtMost("num_prompt", s.NumPrompt, 16)
	c.NonNegative("mu", s.Mu)
	c.Positive("temp", s.Temp)
	c.NonNegative("init_std", s.InitStd)
	if s.ClassTokenPosition != "" {
		c.OneOf("class_token_position", s.ClassTokenPosition, prompt.PositionEnd, prompt.PositionMiddle, prompt.PositionFront)
	}
}

func (s *Settings) config(seed uint64) Config {
	return Config{NCtx: s.NCtx, Bottleneck: s.Bottleneck, NumPrompt: s.NumPrompt, Mu: s.Mu, Temp: s.Temp, InitStd: s.InitStd, Seed: seed, Position: s.ClassTokenPosition}
}

func fromConfig(c Config) *Settings {
	return &Settings{NCtx: c.NCtx, Bottleneck: c.Bottleneck, NumPrompt: c.NumPrompt, Mu: c.Mu, Temp: c.Temp, InitStd: c.InitStd, ClassTokenPosition: c.Position}
}

// Method is FedPGP for the methods registry.
type Method struct{}

// Info implements methods.Method.
func (Method) Info() methods.Info {
	return methods.Info{Name: "fedpgp", Trains: "a global context sigma and a personal low-rank U·V (CoOp prompts)",
		Shares: "sigma only (FedAvg, weights n_i); U and V stay on the site",
		Loader: methods.DasslLoader, // sajjad-ucsb/pFedMMA trainers/fedpgp.py: Dassl's fed_train_loader_x
		Paper:  "Cui et al., Harmonizing Generalization and Personalization in Federated Prompt Learning (ICML 2024)"}
}

// DefaultConfig implements methods.Method.
func (Method) DefaultConfig() config.Section { return fromConfig(DefaultConfig()) }

// Depth implements methods.Method: the image encoder is frozen whole.
func (Method) Depth(config.Section, int) (int, error) { return methods.Features, nil }

func settings(sec config.Section) (*Settings, error) {
	s, err := methods.Section[Settings]("fedpgp", sec)
	if err != nil {
		return nil, err
	}
	return s, s.config(0).Validate()
}

// Build implements methods.Method.
func (Method) Build(env *methods.Env, sec config.Section) (*methods.Plan, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	cfg := s.config(env.Seed)
	return client.Build(env, &client.Spec{Name: "fedpgp", Placeholder: cfg.NCtx, Shared: federation.Names(ParamSigma),
		NewLearner: func(_ int, tokens []int) (client.Learner, error) {
			l, err := New(env.Model, tokens, cfg)
			if err != nil {
				return nil, err
			}
			return l, nil
		}})
}

// Prepare implements client.Learner: the text features Logits scores
// against, computed once per evaluation.
func (l *Learner) Prepare() error {
	f, err := l.TextFeatures()
	l.evalTxt = append(l.evalTxt[:0], f...)
	return err
}

// Logits implements client.Learner: the cosine head on cached image
// features img [B, E] against Prepare's f_P text features (sigma + U·V);
// with N > 1 prompts a class scores the best of its N prompts.
func (l *Learner) Logits(img []float32, B int) ([]float32, error) {
	E := l.model.W.Config.EmbedDim
	R := len(l.evalTxt) / E
	all := clip.Logits(img, l.evalTxt, B, R, E, l.LogitScale)
	N := l.Cfg.NumPrompt
	if N <= 1 {
		return all, nil
	}
	C := R / N
	out := make([]float32, B*C)
	for b := 0; b < B; b++ {
		for c := 0; c < C; c++ {
			best := all[b*R+c]
			for n := 1; n < N; n++ {
				best = max(best, all[b*R+n*C+c])
			}
			out[b*C+c] = best
		}
	}
	return out, nil
}

// Predictor implements methods.Method: the site's sigma + U·V.
func (Method) Predictor(pe methods.PredictEnv, sec config.Section, saved tensor.Named) (methods.Predictor, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
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
		return nil, err
	}
	if err := l.Prepare(); err != nil {
		return nil, err
	}
	return l.Logits(append([]float32(nil), m.EncodeImage(pixels, B)...), B)
}

// SmallSettings implements methods.SmallRun: 8 context tokens leave room
// for the class names in a small CLIP's 24-token prompts.
func (Method) SmallSettings(int) map[string]string { return map[string]string{"n_ctx": "8"} }
