package promptfl

import (
	"fmt"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

func init() { methods.Register(Method{}) }

// Settings is the promptfl config section.
type Settings struct {
	// NCtx is the number of learned context tokens (CoOp's n_ctx; 16).
	NCtx int `yaml:"n_ctx"`
	// ClassSpecific learns one context per class (CoOp's CSC; false).
	ClassSpecific bool `yaml:"class_specific"`
	// InitStd is the standard deviation of the context's N(0, σ²) init (0.02).
	InitStd float64 `yaml:"init_std"`
	// ProxMu is FedProx's μ (≥ 0); 0 is plain FedAvg.
	ProxMu float64 `yaml:"prox_mu"`
	// ClassTokenPosition is CoOp's class_token_position: end (default),
	// middle (the class name between the context's halves) or front.
	ClassTokenPosition string `yaml:"class_token_position"`
}

// Check implements config.Section.
func (s *Settings) Check(c *config.Checker) {
	c.AtLeast("n_ctx", s.NCtx, 1)
	c.AtMost("n_ctx", s.NCtx, 64)
	c.NonNegative("init_std", s.InitStd)
	c.NonNegative("prox_mu", s.ProxMu)
	if s.ClassTokenPosition != "" {
		c.OneOf("class_token_position", s.ClassTokenPosition, prompt.PositionEnd, prompt.PositionMiddle, prompt.PositionFront)
	}
}

func (s *Settings) config(seed uint64) Config {
	return Config{NCtx: s.NCtx, ClassSpecific: s.ClassSpecific, InitStd: s.InitStd, ProxMu: s.ProxMu, Seed: seed, Position: s.ClassTokenPosition}
}

// Method is PromptFL for the methods registry.
type Method struct{}

// Info implements methods.Method.
func (Method) Info() methods.Info {
	return methods.Info{Name: "promptfl", Trains: "a CoOp text context (n_ctx vectors) on frozen CLIP",
		Shares: "the context (FedAvg, weights n_i; optional FedProx μ)",
		Loader: methods.DasslLoader, // sajjad-ucsb/pFedMMA trainers/promptfl.py: Dassl's fed_train_loader_x
		Paper:  "Guo et al., PromptFL: Let Federated Participants Cooperatively Learn Prompts Instead of Models (2023)"}
}

// DefaultConfig implements methods.Method.
func (Method) DefaultConfig() config.Section {
	c := DefaultConfig()
	return &Settings{NCtx: c.NCtx, InitStd: c.InitStd, ClassTokenPosition: prompt.PositionEnd}
}

// Depth implements methods.Method: the image encoder is frozen whole.
func (Method) Depth(config.Section, int) (int, error) { return methods.Features, nil }

func settings(sec config.Section) (*Settings, error) {
	return methods.Section[Settings]("promptfl", sec)
}

// Build implements methods.Method.
func (Method) Build(env *methods.Env, sec config.Section) (*methods.Plan, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	cfg := s.config(env.Seed)
	return client.Build(env, &client.Spec{Name: "promptfl", Placeholder: cfg.NCtx, Shared: federation.Names(ParamCtx),
		NewLearner: func(_ int, tokens []int) (client.Learner, error) {
			l, err := New(env.Model, tokens, cfg)
			if err != nil {
				return nil, err
			}
			return l, nil
		},
		Site: func(c *client.Client) (any, error) { return &site{c: c, prox: cfg.ProxMu > 0}, nil }})
}

// site receives the round's global context and, with FedProx, makes it the
// learner's anchor.
type site struct {
	c    *client.Client
	prox bool
}

// Receive implements client.Receiver.
func (s *site) Receive(in tensor.Named) error {
	if err := s.c.ReceiveShared(in); err != nil {
		return err
	}
	l, err := s.c.Learner()
	if err != nil {
		return err
	}
	var anchor tensor.Named
	if s.prox {
		anchor = tensor.Named{ParamCtx: s.c.P[ParamCtx]} // the round's global context
	}
	return l.(*Learner).SetGlobal(anchor)
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

// Predictor implements methods.Method: the site's context on the frozen
// model.
func (Method) Predictor(pe methods.PredictEnv, sec config.Section, saved tensor.Named) (methods.Predictor, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	ctx, ok := saved[ParamCtx]
	if !ok {
		return nil, fmt.Errorf("promptfl: saved site lacks %q", ParamCtx)
	}
	return predictor{pe: pe, cfg: s.config(0), ctx: ctx}, nil
}

type predictor struct {
	pe  methods.PredictEnv
	cfg Config
	ctx *tensor.Tensor
}

func (p predictor) Logits(pixels []float32, B int, classes []string) ([]float32, error) {
	m := p.pe.Model
	l, err := client.PredictLearner(p.pe, p.cfg.NCtx, classes, tensor.Named{ParamCtx: p.ctx}, func(tokens []int) (*Learner, error) {
		return New(m, tokens, p.cfg)
	})
	if err != nil {
		return nil, err
	}
	txt, err := l.TextFeatures()
	if err != nil {
		return nil, err
	}
	txt = append([]float32(nil), txt...)
	img := m.EncodeImage(pixels, B)
	E := m.W.Config.EmbedDim
	return clip.Logits(img, txt, B, len(classes), E, m.W.LogitScale), nil
}

// SmallSettings implements methods.SmallRun: 8 context tokens leave room
// for the class names in a small CLIP's 24-token prompts.
func (Method) SmallSettings(int) map[string]string { return map[string]string{"n_ctx": "8"} }
