package kgcoop

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/tokenizer"
)

func init() { methods.Register(Method{}) }

// noPosition says why class_token_position is refused: KgCoOp's code has
// no position other than end.
const noPosition = "the authors' KgCoOp prompt learner (htyao89/KgCoOp trainers/kgcoop.py) reads CLASS_TOKEN_POSITION but always builds [SOS][context][name] (only end)"

// Settings is the kgcoop config section. The hand-crafted prompts whose
// text features the context is pulled towards are the run's template
// (prompt_template, "a photo of a {}."; the authors' CUSTOM_TEMPLATES per
// data set).
type Settings struct {
	// NCtx is the number of learned context tokens when CtxInit is empty (4).
	NCtx int `yaml:"n_ctx"`
	// W is λ, the weight of the pull term 1 − mean cos(T_c, F_c) (8).
	W float64 `yaml:"w"`
	// CtxInit initialises the context from these words' token embeddings
	// (their count of tokens is then n_ctx); empty: N(0, init_std²).
	CtxInit string `yaml:"ctx_init"`
	// InitStd is the standard deviation of the random context init (0.02).
	InitStd float64 `yaml:"init_std"`
	// ClassTokenPosition is CoOp's class_token_position, accepted only as
	// end (see noPosition).
	ClassTokenPosition string `yaml:"class_token_position,omitempty"`
	// TemplateRows, when set, are the hand-crafted prompts' token rows
	// [C, ctx] of every label space, in place of the run's template: a
	// fixture round's "template_tokens" (no configuration key).
	TemplateRows []int `yaml:"-"`
}

// Check implements config.Section.
func (s *Settings) Check(c *config.Checker) {
	if p := s.ClassTokenPosition; p != "" && p != prompt.PositionEnd {
		c.Fail("class_token_position", "%q: %s", p, noPosition)
	}
	c.AtLeast("n_ctx", s.NCtx, 1)
	c.AtMost("n_ctx", s.NCtx, 64)
	c.NonNegative("init_std", s.InitStd)
	c.NonNegative("w", s.W)
}

// Method is KgCoOp for the methods registry.
type Method struct{}

// Info implements methods.Method.
func (Method) Info() methods.Info {
	return methods.Info{Name: "kgcoop", Trains: "a CoOp context pulled towards the hand-crafted prompts' text features (frozen CLIP)",
		Shares: "the context (FedAvg, weights n_i)",
		Loader: methods.DasslLoader, // htyao89/KgCoOp: Dassl.ProGrad's train_loader_x
		Paper:  "Yao et al., Visual-Language Prompt Tuning with Knowledge-guided Context Optimization (CVPR 2023), federated as in FLiP / PMFLT"}
}

// DefaultConfig implements methods.Method: the authors' ctxv1 config
// (n_ctx 4 from "a photo of a") with w = 8.
func (Method) DefaultConfig() config.Section {
	return &Settings{NCtx: 4, W: 8, CtxInit: "a photo of a", InitStd: 0.02}
}

// Depth implements methods.Method: the image encoder is frozen whole.
func (Method) Depth(config.Section, int) (int, error) { return methods.Features, nil }

func settings(sec config.Section) (*Settings, error) {
	return methods.Section[Settings]("kgcoop", sec)
}

func (s *Settings) config(m *clip.Model, tok *tokenizer.Tokenizer, seed uint64) (Config, error) {
	cfg := Config{NCtx: s.NCtx, W: s.W, InitStd: s.InitStd, Seed: seed}
	if tok == nil && strings.TrimSpace(s.CtxInit) != "" {
		// in-memory runs (bench, tests) have no tokenizer to read the words
		slog.Warn("no tokenizer: ctx_init ignored, the context is drawn at random", "method", "kgcoop", "ctx_init", s.CtxInit, "n_ctx", s.NCtx)
		return cfg, cfg.Validate()
	}
	init, n, err := prompt.InitContext(m, tok, s.CtxInit)
	if err != nil {
		return cfg, fmt.Errorf("kgcoop: %w", err)
	}
	if init != nil {
		cfg.NCtx, cfg.InitCtx = n, init
	}
	return cfg, cfg.Validate()
}

// Build implements methods.Method.
func (Method) Build(env *methods.Env, sec config.Section) (*methods.Plan, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	cfg, err := s.config(env.Model, env.Tok, env.Seed)
	if err != nil {
		return nil, err
	}
	spec := &client.Spec{Name: "kgcoop", Placeholder: cfg.NCtx, Shared: federation.Names(ParamCtx),
		NewLearner: func(space int, tokens []int) (client.Learner, error) {
			template := s.TemplateRows
			if template == nil {
				if template, err = env.SpaceTokens(space); err != nil {
					return nil, fmt.Errorf("kgcoop: %w", err)
				}
			}
			l, err := New(env.Model, tokens, template, cfg)
			if err != nil {
				return nil, err
			}
			return l, nil
		}}
	return client.Build(env, spec)
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
// model (the pull target plays no part in scoring).
func (Method) Predictor(pe methods.PredictEnv, sec config.Section, saved tensor.Named) (methods.Predictor, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	ctx, ok := saved[ParamCtx]
	if !ok || len(ctx.Shape) != 2 {
		return nil, fmt.Errorf("kgcoop: saved site lacks %q [n_ctx, width]", ParamCtx)
	}
	return predictor{pe: pe, cfg: Config{NCtx: ctx.Shape[0], W: s.W, InitStd: s.InitStd}, ctx: ctx}, nil
}

type predictor struct {
	pe  methods.PredictEnv
	cfg Config
	ctx *tensor.Tensor
}

func (p predictor) Logits(pixels []float32, B int, classes []string) ([]float32, error) {
	m := p.pe.Model
	l, err := client.PredictLearner(p.pe, p.cfg.NCtx, classes, tensor.Named{ParamCtx: p.ctx}, func(tokens []int) (*Learner, error) {
		return New(m, tokens, tokens, p.cfg)
	})
	if err != nil {
		return nil, fmt.Errorf("kgcoop: %w", err)
	}
	txt, err := l.TextFeatures()
	if err != nil {
		return nil, err
	}
	txt = append([]float32(nil), txt...)
	img := m.EncodeImage(pixels, B)
	return clip.Logits(img, txt, B, len(classes), m.W.Config.EmbedDim, m.W.LogitScale), nil
}
