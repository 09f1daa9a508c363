package prograd

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

// noPosition says why class_token_position is refused.
const noPosition = "pfedmma's ProGrad builds [SOS][context][name] (end); the authors' \"middle\" raises a NameError (PromptLearner reads an undefined n_ctx) and \"front\" is not implemented here"

// Settings is the prograd config section. The zero-shot teacher's
// hand-crafted prompts are the run's template (prompt_template, "a photo
// of a {}."; the authors' CUSTOM_TEMPLATES per data set).
type Settings struct {
	// NCtx is the number of learned context tokens (16).
	NCtx int `yaml:"n_ctx"`
	// CtxInit initialises the last context rows from these words' token
	// embeddings, the rows before them zero (the authors' CTX_INIT); empty:
	// N(0, init_std²).
	CtxInit string `yaml:"ctx_init"`
	// InitStd is the standard deviation of the random context init (0.02).
	InitStd float64 `yaml:"init_std"`
	// T is the distillation temperature (1).
	T float64 `yaml:"T"`
	// Lambda is λ, the share of G_ce's conflicting component removed (1).
	Lambda float64 `yaml:"lambda"`
	// ClassTokenPosition is CoOp's class_token_position, accepted only as
	// end (see noPosition).
	ClassTokenPosition string `yaml:"class_token_position,omitempty"`
	// TemplateRows, when set, are the teacher's prompt token rows [C, ctx]
	// of every label space, in place of the run's template: a fixture's
	// "template_tokens" (no configuration key).
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
	c.NonNegative("lambda", s.Lambda)
	if !(s.T > 0) {
		c.Fail("T", "%g: the temperature must be positive", s.T)
	}
}

// Method is ProGrad for the methods registry.
type Method struct{}

// Info implements methods.Method.
func (Method) Info() methods.Info {
	return methods.Info{Name: "prograd", Trains: "a CoOp context whose cross-entropy gradient is projected off the direction conflicting with the zero-shot CLIP's (frozen CLIP)",
		Shares: "the context (FedAvg, weights n_i)",
		Paper:  "Zhu et al., Prompt-aligned Gradient for Prompt Tuning (ICCV 2023), federated as in FLiP",
		Loader: methods.DasslLoader, // BeierZhu/Prompt-align Dassl.ProGrad.pytorch/dassl/data/data_manager.py
	}
}

// DefaultConfig implements methods.Method: the authors' scripts (n_ctx 16
// with CTX_INIT "a photo of a", T 1, λ 1).
func (Method) DefaultConfig() config.Section {
	return &Settings{NCtx: 16, CtxInit: "a photo of a", InitStd: 0.02, T: 1, Lambda: 1}
}

// Depth implements methods.Method: the image encoder is frozen whole.
func (Method) Depth(config.Section, int) (int, error) { return methods.Features, nil }

func settings(sec config.Section) (*Settings, error) {
	return methods.Section[Settings]("prograd", sec)
}

// config turns the settings into the learner's, reading ctx_init's words
// with tok: they fill the last context rows, the others zero.
func (s *Settings) config(m *clip.Model, tok *tokenizer.Tokenizer, seed uint64) (Config, error) {
	cfg := Config{NCtx: s.NCtx, T: s.T, Lambda: s.Lambda, InitStd: s.InitStd, Seed: seed}
	if tok == nil && strings.TrimSpace(s.CtxInit) != "" {
		// in-memory runs (bench, tests) have no tokenizer to read the words
		slog.Warn("no tokenizer: ctx_init ignored, the context is drawn at random", "method", "prograd", "ctx_init", s.CtxInit, "n_ctx", s.NCtx)
		return cfg, cfg.Validate()
	}
	words, n, err := prompt.InitContext(m, tok, s.CtxInit)
	if err != nil {
		return cfg, fmt.Errorf("prograd: %w", err)
	}
	if words != nil {
		if n > cfg.NCtx {
			return cfg, fmt.Errorf("prograd: ctx_init %q has %d tokens, more than n_ctx %d", s.CtxInit, n, cfg.NCtx)
		}
		D := len(words) / n
		cfg.InitCtx = make([]float32, cfg.NCtx*D)
		copy(cfg.InitCtx[(cfg.NCtx-n)*D:], words)
	}
	return cfg, cfg.Validate()
}

// Build implements methods.Method.
func (Method) Build(env *methods.Env, sec config.Section) (*methods.Plan, error) {
	spec, err := clientSpec(env, sec)
	if err != nil {
		return nil, err
	}
	return client.Build(env, spec)
}

// clientSpec is ProGrad as the clients run it: one learner per label
// space, the context shared.
func clientSpec(env *methods.Env, sec config.Section) (*client.Spec, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	cfg, err := s.config(env.Model, env.Tok, env.Seed)
	if err != nil {
		return nil, err
	}
	spec := &client.Spec{Name: "prograd", Placeholder: cfg.NCtx, Shared: federation.Names(ParamCtx),
		NewLearner: func(space int, tokens []int) (client.Learner, error) {
			template := s.TemplateRows
			if template == nil {
				if template, err = env.SpaceTokens(space); err != nil {
					return nil, fmt.Errorf("prograd: %w", err)
				}
			}
			l, err := New(env.Model, tokens, template, cfg)
			if err != nil {
				return nil, err
			}
			return l, nil
		}}
	return spec, nil
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
// model (the teacher plays no part in scoring).
func (Method) Predictor(pe methods.PredictEnv, sec config.Section, saved tensor.Named) (methods.Predictor, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	ctx, ok := saved[ParamCtx]
	if !ok || len(ctx.Shape) != 2 {
		return nil, fmt.Errorf("prograd: saved site lacks %q [n_ctx, width]", ParamCtx)
	}
	return predictor{pe: pe, cfg: Config{NCtx: ctx.Shape[0], T: s.T, Lambda: s.Lambda, InitStd: s.InitStd}, ctx: ctx}, nil
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
		return nil, fmt.Errorf("prograd: %w", err)
	}
	txt, err := l.TextFeatures()
	if err != nil {
		return nil, err
	}
	txt = append([]float32(nil), txt...)
	img := m.EncodeImage(pixels, B)
	return clip.Logits(img, txt, B, len(classes), m.W.Config.EmbedDim, m.W.LogitScale), nil
}
