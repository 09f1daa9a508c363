package cocoop

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

// noPosition says why class_token_position is refused: CoCoOp's code has
// no position other than end.
const noPosition = "the authors' CoCoOp prompt learner (KaiyangZhou/CoOp trainers/cocoop.py) has no class-token position: the class name always follows the context (only end)"

// Settings is the cocoop config section.
type Settings struct {
	// NCtx is the number of learned context tokens when CtxInit is empty (4).
	NCtx int `yaml:"n_ctx"`
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
}

// Method is CoCoOp for the methods registry.
type Method struct{}

// Info implements methods.Method.
func (Method) Info() methods.Info {
	return methods.Info{Name: "cocoop", Trains: "a CoOp context plus a meta-net adding an image-conditioned bias (frozen CLIP)",
		Shares: "the whole prompt learner: context and meta-net (FedAvg, weights n_i)",
		Paper:  "Zhou et al., Conditional Prompt Learning for Vision-Language Models (CVPR 2022), federated as in FLiP / PMFLT"}
}

// DefaultConfig implements methods.Method: the authors' ctxv1 config
// (n_ctx 4 from "a photo of a").
func (Method) DefaultConfig() config.Section {
	return &Settings{NCtx: 4, CtxInit: "a photo of a", InitStd: 0.02}
}

// Depth implements methods.Method: the image encoder is frozen whole.
func (Method) Depth(config.Section, int) (int, error) { return methods.Features, nil }

func settings(sec config.Section) (*Settings, error) {
	s, ok := sec.(*Settings)
	if !ok || s == nil {
		return nil, fmt.Errorf("cocoop: config section is %T, want *cocoop.Settings", sec)
	}
	return s, nil
}

func (s *Settings) config(m *clip.Model, tok *tokenizer.Tokenizer, seed uint64) (Config, error) {
	cfg := Config{NCtx: s.NCtx, InitStd: s.InitStd, Seed: seed}
	if tok == nil && strings.TrimSpace(s.CtxInit) != "" {
		// in-memory runs (bench, tests) have no tokenizer to read the words
		slog.Warn("no tokenizer: ctx_init ignored, the context is drawn at random", "method", "cocoop", "ctx_init", s.CtxInit, "n_ctx", s.NCtx)
		return cfg, cfg.Validate()
	}
	init, n, err := prompt.InitContext(m, tok, s.CtxInit)
	if err != nil {
		return cfg, fmt.Errorf("cocoop: %w", err)
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
	spec := &promptfed.Spec{Name: "cocoop", Placeholder: cfg.NCtx,
		Shared: federation.Names(ParamNames...),
		NewLearner: func(tokens []int) (promptfed.Learner, error) {
			l, err := New(env.Model, tokens, cfg)
			if err != nil {
				return nil, err
			}
			return spaceLearner{l}, nil
		}}
	return promptfed.Build(env, spec)
}

// spaceLearner scores each image with its own prompts.
type spaceLearner struct{ *Learner }

func (spaceLearner) Prepare() error { return nil }

// Predictor implements methods.Method: the site's prompt learner on the
// frozen model, every image with its own prompts.
func (Method) Predictor(pe methods.PredictEnv, sec config.Section, saved tensor.Named) (methods.Predictor, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	ctx, ok := saved[ParamCtx]
	if !ok || len(ctx.Shape) != 2 {
		return nil, fmt.Errorf("cocoop: saved site lacks %q [n_ctx, width]", ParamCtx)
	}
	for _, name := range ParamNames {
		if _, ok := saved[name]; !ok {
			return nil, fmt.Errorf("cocoop: saved site lacks %q", name)
		}
	}
	return predictor{pe: pe, cfg: Config{NCtx: ctx.Shape[0], InitStd: s.InitStd}, saved: saved}, nil
}

type predictor struct {
	pe    methods.PredictEnv
	cfg   Config
	saved tensor.Named
}

func (p predictor) Logits(pixels []float32, B int, classes []string) ([]float32, error) {
	m := p.pe.Model
	tokens, err := p.pe.ClassPromptTokens(classes, promptfed.Placeholder(p.cfg.NCtx))
	if err != nil {
		return nil, err
	}
	l, err := New(m, tokens, p.cfg)
	if err != nil {
		return nil, err
	}
	if err := prompt.Load(l.Params(), p.saved); err != nil {
		return nil, fmt.Errorf("cocoop: %w", err)
	}
	img := m.EncodeImage(pixels, B)
	out, err := l.Logits(img, B)
	return append([]float32(nil), out...), err
}

// ConfigFromMeta reads n_ctx and init_std from fixture metadata.
func ConfigFromMeta(meta map[string]string) (Config, error) {
	c := Config{InitStd: 0.02}
	var err error
	if err = prompt.EndOnly(meta["class_token_position"], noPosition); err != nil {
		return c, fmt.Errorf("cocoop: metadata %w", err)
	}
	if c.NCtx, err = prompt.MetaInt(meta, "n_ctx"); err != nil {
		return c, fmt.Errorf("cocoop: %w", err)
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
	return &Settings{NCtx: c.NCtx, InitStd: c.InitStd}, nil
}

// Step implements fixture.Stepper.
func (Method) Step(ctx context.Context, f *fixture.Fixture) (tensor.Named, error) {
	return StepFromFile(f.Model, f.Params, f.FloatBatch(), f.Meta)
}

// StepFromFile replays one training step in the fixture layout of
// testdata/cocoop/step.safetensors: params holds the prompt learner,
// batch "tokens", "labels" and "images" (or "image_features"); meta gives
// n_ctx, lr, momentum, weight_decay and logit_scale. The result holds
// "image_features", "meta_bias", "ctx_shifted", "text_features" [B, C, E],
// "logits", "loss", "loss_ce", "grad.<p>" and "step1.<p>".
func StepFromFile(m *clip.Model, params, batch tensor.Named, meta map[string]string) (tensor.Named, error) {
	l, h, err := fromFile(m, params, batch, meta, false)
	if err != nil {
		return nil, err
	}
	img, B, err := prompt.ImageFeatures(m, batch, "")
	if err != nil {
		return nil, fmt.Errorf("cocoop: %w", err)
	}
	labels, err := prompt.Ints(batch, "labels")
	if err != nil {
		return nil, fmt.Errorf("cocoop: %w", err)
	}
	out, err := prompt.StepOnce(l, img, labels, h)
	if err != nil {
		return nil, fmt.Errorf("cocoop: %w", err)
	}
	for k, v := range l.Intermediates(B) {
		out[k] = v
	}
	out["image_features"] = &tensor.Tensor{Shape: []int{B, l.E}, Data: img}
	return out, nil
}

// RoundFromFile replays the round of testdata/cocoop/round.safetensors
// with prompt.Round (the fixture's own loop; fixture.Round is the
// production path).
func RoundFromFile(m *clip.Model, params, batch tensor.Named, meta map[string]string) (tensor.Named, error) {
	l, h, err := fromFile(m, params, batch, meta, true)
	if err != nil {
		return nil, err
	}
	out, err := prompt.Round(m, l, params, batch, h)
	if err != nil {
		return nil, fmt.Errorf("cocoop: %w", err)
	}
	return out, nil
}

func fromFile(m *clip.Model, params, batch tensor.Named, meta map[string]string, round bool) (*Learner, prompt.Hyper, error) {
	h, err := prompt.ReadHyper(meta, round)
	if err != nil {
		return nil, h, fmt.Errorf("cocoop: %w", err)
	}
	cfg, err := ConfigFromMeta(meta)
	if err != nil {
		return nil, h, err
	}
	tokens, err := prompt.Ints(batch, "tokens")
	if err != nil {
		return nil, h, fmt.Errorf("cocoop: %w", err)
	}
	l, err := New(m, tokens, cfg)
	if err != nil {
		return nil, h, err
	}
	l.LogitScale = float32(h.LogitScale)
	if err := prompt.Load(l.Params(), params); err != nil {
		return nil, h, fmt.Errorf("cocoop: %w", err)
	}
	return l, h, nil
}
