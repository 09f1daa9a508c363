package cocoop

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
		Loader: methods.DasslLoader, // KaiyangZhou/CoOp: Dassl's TrainerX loader
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
	return methods.Section[Settings]("cocoop", sec)
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
	spec := &client.Spec{Name: "cocoop", Placeholder: cfg.NCtx,
		Shared: federation.Names(ParamNames...),
		NewLearner: func(_ int, tokens []int) (client.Learner, error) {
			l, err := New(env.Model, tokens, cfg)
			if err != nil {
				return nil, err
			}
			return l, nil
		}}
	return client.Build(env, spec)
}

// Prepare implements client.Learner: nothing to compute once per
// evaluation, as Logits scores each image with its own prompts.
func (l *Learner) Prepare() error { return nil }

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
	l, err := client.PredictLearner(p.pe, p.cfg.NCtx, classes, p.saved, func(tokens []int) (*Learner, error) {
		return New(m, tokens, p.cfg)
	})
	if err != nil {
		return nil, fmt.Errorf("cocoop: %w", err)
	}
	img := m.EncodeImage(pixels, B)
	out, err := l.Logits(img, B)
	return append([]float32(nil), out...), err
}
