package kgcoop

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/fixture"
	"github.com/pfedmma/pfedmma/methods/promptfed"
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
	s, ok := sec.(*Settings)
	if !ok || s == nil {
		return nil, fmt.Errorf("kgcoop: config section is %T, want *kgcoop.Settings", sec)
	}
	return s, nil
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
	spec := &promptfed.Spec{Name: "kgcoop", Placeholder: cfg.NCtx, Shared: federation.Names(ParamCtx),
		NewSpaceLearner: func(space int, tokens []int) (promptfed.Learner, error) {
			template, err := env.SpaceTokens(space)
			if err != nil {
				return nil, fmt.Errorf("kgcoop: %w", err)
			}
			l, err := New(env.Model, tokens, template, cfg)
			if err != nil {
				return nil, err
			}
			return &spaceLearner{Learner: l}, nil
		}}
	return promptfed.Build(env, spec)
}

// spaceLearner scores with the cosine head on cached image features.
type spaceLearner struct {
	*Learner
	txt []float32
}

func (s *spaceLearner) Prepare() error {
	f, err := s.TextFeatures()
	s.txt = append(s.txt[:0], f...)
	return err
}

func (s *spaceLearner) Logits(img []float32, B int) ([]float32, error) {
	return clip.Logits(img, s.txt, B, s.C, s.E, s.LogitScale), nil
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
	tokens, err := p.pe.ClassPromptTokens(classes, promptfed.Placeholder(p.cfg.NCtx))
	if err != nil {
		return nil, err
	}
	l, err := New(m, tokens, tokens, p.cfg)
	if err != nil {
		return nil, err
	}
	if err := prompt.Load(l.Params(), tensor.Named{ParamCtx: p.ctx}); err != nil {
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

// ConfigFromMeta reads n_ctx and w from fixture metadata.
func ConfigFromMeta(meta map[string]string) (Config, error) {
	c := Config{InitStd: 0.02}
	var err error
	if err = prompt.EndOnly(meta["class_token_position"], noPosition); err != nil {
		return c, fmt.Errorf("kgcoop: metadata %w", err)
	}
	if c.NCtx, err = prompt.MetaInt(meta, "n_ctx"); err != nil {
		return c, fmt.Errorf("kgcoop: %w", err)
	}
	if c.W, err = prompt.MetaFloat(meta, "w"); err != nil {
		return c, fmt.Errorf("kgcoop: %w", err)
	}
	return c, c.Validate()
}

// SettingsFrom implements fixture.Settings (the fixture's init
// tensors replace the context init, so ctx_init is empty).
func (Method) SettingsFrom(f *fixture.Fixture) (config.Section, error) {
	c, err := ConfigFromMeta(f.Meta)
	if err != nil {
		return nil, err
	}
	return &Settings{NCtx: c.NCtx, W: c.W, InitStd: c.InitStd}, nil
}

// Step implements fixture.Stepper.
func (Method) Step(ctx context.Context, f *fixture.Fixture) (tensor.Named, error) {
	return StepFromFile(f.Model, f.Params, f.FloatBatch(), f.Meta)
}

// StepFromFile replays one training step in the fixture layout of
// testdata/kgcoop/step.safetensors: params holds the context, batch
// "tokens", "template_tokens" (the hand-crafted prompts), "labels" and
// "images" (or "image_features"); meta gives n_ctx, w, lr, momentum,
// weight_decay and logit_scale. The result holds "image_features",
// "text_features", "template_features" (normalised), "cos", "score",
// "logits", "loss", "loss_ce", "loss_kg", "grad.<p>" and "step1.<p>".
func StepFromFile(m *clip.Model, params, batch tensor.Named, meta map[string]string) (tensor.Named, error) {
	l, h, err := fromFile(m, params, batch, meta, false)
	if err != nil {
		return nil, err
	}
	img, B, err := prompt.ImageFeatures(m, batch, "")
	if err != nil {
		return nil, fmt.Errorf("kgcoop: %w", err)
	}
	labels, err := prompt.Ints(batch, "labels")
	if err != nil {
		return nil, fmt.Errorf("kgcoop: %w", err)
	}
	out, err := prompt.StepOnce(l, img, labels, h)
	if err != nil {
		return nil, fmt.Errorf("kgcoop: %w", err)
	}
	for k, v := range l.Intermediates() {
		out[k] = v
	}
	out["image_features"] = &tensor.Tensor{Shape: []int{B, l.E}, Data: img}
	return out, nil
}

// RoundFromFile replays the round of testdata/kgcoop/round.safetensors
// with prompt.Round (the fixture's own loop; fixture.Round is the
// production path).
func RoundFromFile(m *clip.Model, params, batch tensor.Named, meta map[string]string) (tensor.Named, error) {
	l, h, err := fromFile(m, params, batch, meta, true)
	if err != nil {
		return nil, err
	}
	out, err := prompt.Round(m, l, params, batch, h)
	if err != nil {
		return nil, fmt.Errorf("kgcoop: %w", err)
	}
	return out, nil
}

func fromFile(m *clip.Model, params, batch tensor.Named, meta map[string]string, round bool) (*Learner, prompt.Hyper, error) {
	h, err := prompt.ReadHyper(meta, round)
	if err != nil {
		return nil, h, fmt.Errorf("kgcoop: %w", err)
	}
	cfg, err := ConfigFromMeta(meta)
	if err != nil {
		return nil, h, err
	}
	tokens, err := prompt.Ints(batch, "tokens")
	if err != nil {
		return nil, h, fmt.Errorf("kgcoop: %w", err)
	}
	template, err := prompt.Ints(batch, "template_tokens")
	if err != nil {
		return nil, h, fmt.Errorf("kgcoop: %w", err)
	}
	l, err := New(m, tokens, template, cfg)
	if err != nil {
		return nil, h, err
	}
	l.LogitScale = float32(h.LogitScale)
	if err := prompt.Load(l.Params(), params); err != nil {
		return nil, h, fmt.Errorf("kgcoop: %w", err)
	}
	return l, h, nil
}
