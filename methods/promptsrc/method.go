package promptsrc

import (
	"cmp"
	"fmt"
	"math"
	"strings"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/tensor"
)

func init() { methods.Register(Method{}) }

// Shared selects the tensors the server averages: every prompt (FLiP
// averages its PromptSRC's whole prompt learner).
var Shared = federation.Filter(func(string) bool { return true })

// Settings is the promptsrc config section.
type Settings struct {
	// NCtxText is the number of text prompt tokens per layer (the authors' 4).
	NCtxText int `yaml:"n_ctx_text"`
	// NCtxVision is the number of visual prompt tokens per layer (the authors' 4).
	NCtxVision int `yaml:"n_ctx_vision"`
	// PromptDepthText is J_t, the text encoder's prompted blocks (the
	// embedding-level prompts count as the first; the authors' 9 of
	// ViT-B/16's 12).
	PromptDepthText int `yaml:"prompt_depth_text"`
	// PromptDepthVision is J_v, the image encoder's prompted blocks (the
	// appended prompts count as the first; the authors' 9 of 12).
	PromptDepthVision int `yaml:"prompt_depth_vision"`
	// InitStd is σ of the N(0, σ²) draw of every prompt (0.02).
	InitStd float64 `yaml:"init_std"`
	// TextLossWeight is λ_t, the weight of the L1 pull of the normalised
	// text features towards the frozen CLIP's template average (the
	// authors' 25).
	TextLossWeight float64 `yaml:"text_loss_weight"`
	// ImageLossWeight is λ_i, the weight of the L1 pull of the normalised
	// image features towards the frozen CLIP's (the authors' 10).
	ImageLossWeight float64 `yaml:"image_loss_weight"`
	// GPAMean is μ of the Gaussian prompt aggregation over a client's
	// local epochs e = 1..E: after its local training a client's prompts
	// are Σ_e w_e·θ_e, w_e ∝ N(e; μ, σ²) (the authors aggregate over their
	// 20 training epochs with μ 15).
	GPAMean float64 `yaml:"gpa_mean"`
	// GPAStd is σ of that aggregation (the authors' 1); 0 turns it off
	// (the last epoch's prompts).
	GPAStd float64 `yaml:"gpa_std"`
	// GPAOver is what the Gaussian prompt aggregation weighs: "epochs"
	// (also empty, the default: each client over its local epochs, the
	// authors' single-site rule) or "rounds" (FLiP's federated rule,
	// flcore/models/clip/PromptSRC.py gauss_avg, on the server: after
	// round r's FedAvg the global prompts become the running sum
	// Σ_{t≤r} g_t·avg_t, g_t ∝ N(t; gpa_mean, gpa_std²) normalised over
	// the rounds t = 0..R−1 of the whole run — not over the rounds so far,
	// so the prompts sent in early rounds are scaled towards zero — and
	// the clients train without GPA).
	GPAOver string `yaml:"gpa_over"`
	// GPARounds is R of gpa_over rounds (FLiP: its global_rounds + 1, the
	// rounds it runs); 0, the default: the run's federation.rounds.
	GPARounds int `yaml:"gpa_rounds"`
	// Templates are the hand-crafted prompts ("a photo of a {}.") whose
	// frozen text features, averaged, are the text anchor; empty: the run's
	// prompt_template alone (the authors average 60 ImageNet templates).
	Templates []string `yaml:"templates"`
	// TemplateRows, when set, are the anchor prompts' token rows
	// [nT·C, ctx] (template-major) of every label space: a fixture round's
	// "template_tokens" (no configuration key).
	TemplateRows []int `yaml:"-"`
	// LR, when > 0, replaces the run's optimizer.lr for this method (a
	// schedule keeps its shape, rescaled); 0 keeps the run's.
	LR float64 `yaml:"lr"`
	// LocalEpochs, when > 0, replaces the run's federation.local_epochs
	// for this method; 0 keeps the run's.
	LocalEpochs int `yaml:"local_epochs"`
}

// Check implements config.Section.
func (s *Settings) Check(c *config.Checker) {
	c.AtLeast("n_ctx_text", s.NCtxText, 1)
	c.AtMost("n_ctx_text", s.NCtxText, 64)
	c.AtLeast("n_ctx_vision", s.NCtxVision, 1)
	c.AtMost("n_ctx_vision", s.NCtxVision, 64)
	c.AtLeast("prompt_depth_text", s.PromptDepthText, 1)
	c.AtMost("prompt_depth_text", s.PromptDepthText, 48)
	c.AtLeast("prompt_depth_vision", s.PromptDepthVision, 1)
	c.AtMost("prompt_depth_vision", s.PromptDepthVision, 48)
	c.NonNegative("init_std", s.InitStd)
	c.NonNegative("text_loss_weight", s.TextLossWeight)
	c.NonNegative("image_loss_weight", s.ImageLossWeight)
	c.NonNegative("gpa_std", s.GPAStd)
	if s.GPAOver != "" {
		c.OneOf("gpa_over", s.GPAOver, GPAOverEpochs, GPAOverRounds)
	}
	c.AtLeast("gpa_rounds", s.GPARounds, 0)
	c.NonNegative("lr", s.LR)
	c.AtLeast("local_epochs", s.LocalEpochs, 0)
	c.AtMost("local_epochs", s.LocalEpochs, config.MaxOwnLocalEpochs)
	if math.IsNaN(s.GPAMean) || math.IsInf(s.GPAMean, 0) {
		c.Fail("gpa_mean", "%v: must be finite", s.GPAMean)
	}
	for i, t := range s.Templates {
		if strings.Count(t, "{}") != 1 {
			c.Fail("templates", "entry %d %q: must hold the class placeholder {} once", i, t)
		}
	}
}

// FitModel implements config.ModelFitter: on a model with fewer blocks
// than a prompt depth the depth keeps its share of ViT-B/16's 12 blocks
// (the authors' 9 of 12 → 3 of 4).
func (s *Settings) FitModel(layers int) []string {
	if layers < 1 {
		return nil
	}
	var notes []string
	fit := func(name string, d *int) {
		if *d <= layers {
			return
		}
		old := *d
		*d = min(layers, max(1, int(math.Round(float64(old)/12*float64(layers)))))
		notes = append(notes, fmt.Sprintf("%s %d → %d (of the model's %d blocks)", name, old, *d, layers))
	}
	fit("prompt_depth_text", &s.PromptDepthText)
	fit("prompt_depth_vision", &s.PromptDepthVision)
	return notes
}

func (s *Settings) config(seed uint64) Config {
	return Config{NCtxText: s.NCtxText, NCtxVision: s.NCtxVision, DepthText: s.PromptDepthText, DepthVision: s.PromptDepthVision,
		InitStd: s.InitStd, Seed: seed, TextWeight: s.TextLossWeight, ImageWeight: s.ImageLossWeight}
}

// Method is PromptSRC for the methods registry.
type Method struct{}

// Info implements methods.Method.
func (Method) Info() methods.Info {
	return methods.Info{Name: "promptsrc",
		Trains: "independent deep prompts in both encoders, pulled towards the frozen CLIP's features and logits (L1 on features, KL on logits)",
		Shares: "every prompt (FedAvg, weights n_i)",
		Paper:  "Khattak et al., Self-regulating Prompts: Foundational Model Adaptation without Forgetting (ICCV 2023)",
		Loader: methods.DasslLoader, // muzairkhattak/PromptSRC: a Dassl TrainerX (Dassl.pytorch)
	}
}

// DefaultConfig implements methods.Method: the authors' ViT-B/16 settings
// (configs/trainers/PromptSRC/vit_b16_c2_ep20_batch4_4+4ctx.yaml).
func (Method) DefaultConfig() config.Section {
	c := DefaultConfig()
	return &Settings{NCtxText: c.NCtxText, NCtxVision: c.NCtxVision, PromptDepthText: c.DepthText, PromptDepthVision: c.DepthVision,
		InitStd: c.InitStd, TextLossWeight: c.TextWeight, ImageLossWeight: c.ImageWeight, GPAMean: 15, GPAStd: 1}
}

// Depth implements methods.Method: the image encoder runs from its first
// block every step (the visual prompt is appended before ln_pre, which is
// row-wise, so the image tokens' ln_pre output is the cached prefix).
func (Method) Depth(sec config.Section, layers int) (int, error) {
	s, err := settings(sec)
	if err != nil {
		return 0, err
	}
	if s.PromptDepthText > layers {
		return 0, fmt.Errorf("promptsrc.prompt_depth_text %d: the model has only %d blocks", s.PromptDepthText, layers)
	}
	if s.PromptDepthVision > layers {
		return 0, fmt.Errorf("promptsrc.prompt_depth_vision %d: the model has only %d blocks", s.PromptDepthVision, layers)
	}
	return 0, nil
}

// SmallSettings implements methods.SmallRun: the tiny CLIP of the
// conformance suite has 4 blocks, so both prompt depths are 3 (the
// authors' 9 of 12).
func (Method) SmallSettings(int) map[string]string {
	return map[string]string{"prompt_depth_text": "3", "prompt_depth_vision": "3"}
}

func settings(sec config.Section) (*Settings, error) {
	s, err := methods.Section[Settings]("promptsrc", sec)
	if err != nil {
		return nil, err
	}
	if err := s.config(0).Validate(0); err != nil {
		return nil, err
	}
	return s, nil
}

// templateTokens is the anchor prompts of a label space, [nT·C, ctx]
// template-major.
func (s *Settings) templateTokens(env *methods.Env, space int) ([]int, error) {
	if s.TemplateRows != nil {
		return s.TemplateRows, nil
	}
	if len(s.Templates) == 0 {
		return env.SpaceTokens(space)
	}
	if env.Tok == nil {
		return nil, fmt.Errorf("promptsrc.templates: no tokenizer to read them")
	}
	if space < 0 || space >= len(env.Task.Spaces) {
		return nil, fmt.Errorf("promptsrc: label space %d: the task has %d", space, len(env.Task.Spaces))
	}
	ctx := env.Model.W.Config.Text.ContextLength
	var rows []int
	for _, tmpl := range s.Templates {
		for _, c := range env.Task.Spaces[space].Classes {
			name := strings.ReplaceAll(env.Task.Dataset.Classes[c], "_", " ")
			ids, err := env.Tok.Tokenize(strings.ReplaceAll(tmpl, "{}", name), ctx, false)
			if err != nil {
				return nil, fmt.Errorf("promptsrc.templates: %q: %w", tmpl, err)
			}
			rows = append(rows, ids...)
		}
	}
	return rows, nil
}

// Build implements methods.Method.
func (Method) Build(env *methods.Env, sec config.Section) (*methods.Plan, error) {
	sp, err := buildSpec(env, sec)
	if err != nil {
		return nil, err
	}
	if err := fitPrompts(env, sp.Placeholder); err != nil {
		return nil, err
	}
	return client.Build(env, sp)
}

// fitPrompts refuses, naming the key, an n_ctx_text whose class prompts do
// not fit the model's context.
func fitPrompts(env *methods.Env, n int) error {
	if env.Tok == nil || env.Task == nil {
		return nil
	}
	for space := range env.Task.Spaces {
		if _, err := env.ClassPromptTokens(space, client.Placeholder(n)); err != nil {
			return fmt.Errorf("promptsrc.n_ctx_text: %w", err)
		}
	}
	return nil
}

func buildSpec(env *methods.Env, sec config.Section) (*client.Spec, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	cfg := s.config(env.Seed)
	opts := env.Train.Own("", s.LR, 0, s.LocalEpochs)
	sp := &client.Spec{Name: "promptsrc", Placeholder: cfg.NCtxText, Input: client.Prefixes, Shared: Shared, Train: &opts,
		NewLearner: func(space int, tokens []int) (client.Learner, error) {
			tmpl, err := s.templateTokens(env, space)
			if err != nil {
				return nil, err
			}
			return New(env.Model, tokens, tmpl, cfg)
		}}
	switch {
	case s.GPAStd > 0 && s.GPAOver == GPAOverRounds:
		w, err := RoundWeights(cmp.Or(s.GPARounds, env.Rounds), s.GPAMean, s.GPAStd)
		if err != nil {
			return nil, fmt.Errorf("promptsrc.gpa_over rounds: %w", err)
		}
		sp.Strategy = func(init tensor.Named) federation.Strategy { return newRoundsGPA(sp.Shared, init, w) }
	case s.GPAStd > 0:
		mean, std := s.GPAMean, s.GPAStd
		sp.Site = func(c *client.Client) (any, error) { return &gpaSite{c: c, mean: mean, std: std, epoch: -1}, nil }
	}
	return sp, nil
}

// Predictor implements methods.Method: the site's prompts on the frozen
// model, for any class names (the anchors play no part in scoring).
func (Method) Predictor(pe methods.PredictEnv, sec config.Section, saved tensor.Named) (methods.Predictor, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	if _, ok := saved[ParamCtx]; !ok {
		return nil, fmt.Errorf("promptsrc: saved site lacks %q", ParamCtx)
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
	l, err := client.PredictLearner(p.pe, p.cfg.NCtxText, classes, p.saved, func(tokens []int) (*Learner, error) {
		return New(m, tokens, tokens, p.cfg)
	})
	if err != nil {
		return nil, fmt.Errorf("promptsrc: %w", err)
	}
	if err := l.Prepare(); err != nil {
		return nil, err
	}
	return l.Logits(clip.ImagePrefix(m, 1, pixels, B, nil), B)
}
