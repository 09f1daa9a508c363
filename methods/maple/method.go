package maple

import (
	"fmt"
	"math"
	"strings"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

func init() { methods.Register(Method{}) }

// Prefix starts the name of every tensor of the prompt learner.
const Prefix = "prompt_learner."

// Shared selects the tensors the server averages: the whole prompt learner
// (FLiP and PMFLT average every MaPLe parameter).
var Shared = federation.Prefix(Prefix)

// Settings is the maple config section.
type Settings struct {
	// NCtx is the number of prompt tokens per layer (n_ctx; the authors' 2).
	NCtx int `yaml:"n_ctx"`
	// PromptDepth is J, the number of blocks prompted in each encoder
	// (the embedding-level prompts count as the first; 9 of ViT-B/16's 12).
	PromptDepth int `yaml:"prompt_depth"`
	// InitStd is σ of the N(0, σ²) draw of ctx and the deep text prompts (0.02).
	InitStd float64 `yaml:"init_std"`
	// CtxInit is the authors' CTX_INIT ("a photo of a"): with n_ctx ≤ 4 the
	// class prompts are "{ctx_init} {class}." and ctx starts as the
	// embeddings of their first n_ctx words (it must have at least n_ctx);
	// empty, or n_ctx > 4: "X … X {class}." with ctx drawn N(0, σ²).
	CtxInit string `yaml:"ctx_init"`
	// LR, when set, replaces the run's optimizer.lr for this method; 0
	// keeps the run's.
	LR float64 `yaml:"lr"`
}

// words returns the words before each class name and whether ctx starts
// from their embeddings.
func (s *Settings) words() (string, bool) {
	w := strings.Join(strings.Fields(strings.ReplaceAll(s.CtxInit, "_", " ")), " ")
	if w != "" && s.NCtx <= 4 {
		return w, true
	}
	return client.Placeholder(s.NCtx), false
}

// Check implements config.Section.
func (s *Settings) Check(c *config.Checker) {
	c.AtLeast("n_ctx", s.NCtx, 1)
	c.AtMost("n_ctx", s.NCtx, 64)
	c.AtLeast("prompt_depth", s.PromptDepth, 1)
	c.AtMost("prompt_depth", s.PromptDepth, 48)
	c.NonNegative("init_std", s.InitStd)
	c.NonNegative("lr", s.LR)
}

// train returns the run's local-training settings with this section's lr
// where it is set.
func (s *Settings) train(run train.Options) train.Options {
	return run.Own("", s.LR, 0, 0)
}

// FitModel implements config.ModelFitter: on a model with fewer blocks
// than prompt_depth the depth keeps its share of ViT-B/16's 12 blocks
// (the authors' 9 of 12 → 3 of 4).
func (s *Settings) FitModel(layers int) []string {
	// layers < 1: no transformer blocks to prompt (a ResNet CLIP); MaPLe is
	// refused when a run chooses it, and its settings stay as they are
	if layers < 1 || s.PromptDepth <= layers {
		return nil
	}
	old := s.PromptDepth
	s.PromptDepth = min(layers, max(1, int(math.Round(float64(old)/12*float64(layers)))))
	return []string{fmt.Sprintf("prompt_depth %d → %d (of the model's %d blocks)", old, s.PromptDepth, layers)}
}

func (s *Settings) config(seed uint64) Config {
	_, fromTokens := s.words()
	return Config{NCtx: s.NCtx, Depth: s.PromptDepth, InitStd: s.InitStd, Seed: seed, CtxFromTokens: fromTokens}
}

// Method is MaPLe for the methods registry.
type Method struct{}

// Info implements methods.Method.
func (Method) Info() methods.Info {
	return methods.Info{Name: "maple",
		Trains: "deep prompts in both encoders (n_ctx tokens in blocks < prompt_depth), the visual ones coupled to the text ones by linear maps",
		Shares: "the whole prompt learner (FedAvg, weights n_i, as FLiP/PMFLT)",
		Loader: methods.DasslLoader, // muzairkhattak/multimodal-prompt-learning: Dassl's TrainerX loader
		Paper:  "Khattak et al., MaPLe: Multi-modal Prompt Learning (CVPR 2023)"}
}

// DefaultConfig implements methods.Method: the authors' ViT-B/16 settings.
func (Method) DefaultConfig() config.Section {
	c := DefaultConfig()
	return &Settings{NCtx: c.NCtx, PromptDepth: c.Depth, InitStd: c.InitStd, CtxInit: "a photo of a"}
}

// Depth implements methods.Method: the image encoder runs from its first
// block every step (prompts are appended before ln_pre, which is row-wise,
// so the image tokens' ln_pre output is the cached prefix). prompt_depth
// must not exceed the model's blocks.
func (Method) Depth(sec config.Section, layers int) (int, error) {
	s, err := settings(sec)
	if err != nil {
		return 0, err
	}
	if s.PromptDepth > layers {
		return 0, fmt.Errorf("maple.prompt_depth %d: the model has only %d blocks", s.PromptDepth, layers)
	}
	return 0, nil
}

func settings(sec config.Section) (*Settings, error) {
	s, err := methods.Section[Settings]("maple", sec)
	if err != nil {
		return nil, err
	}
	if err := s.config(0).Validate(0); err != nil {
		return nil, err
	}
	return s, nil
}

// Build implements methods.Method.
func (Method) Build(env *methods.Env, sec config.Section) (*methods.Plan, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	cfg := s.config(env.Seed)
	words, _ := s.words()
	spec := &client.Spec{Name: "maple", Placeholder: cfg.NCtx, Words: words, Input: client.Prefixes, Shared: Shared,
		NewLearner: func(_ int, tokens []int) (client.Learner, error) {
			if err := checkInitWords(tokens, env.Model.W.Config.Text.ContextLength, cfg); err != nil {
				return nil, err
			}
			return New(env.Model, tokens, cfg)
		}}
	opts := s.train(env.Train)
	spec.Train = &opts
	return client.Build(env, spec)
}

// checkInitWords refuses a ctx_init with fewer than n_ctx tokens: its
// embeddings would take the class name's (or the EOT's) place.
func checkInitWords(tokens []int, ctxLen int, cfg Config) error {
	if !cfg.CtxFromTokens {
		return nil
	}
	C := len(tokens) / ctxLen
	want := tokens[1 : 1+cfg.NCtx]
	for c := 1; c < C; c++ {
		row := tokens[c*ctxLen+1 : c*ctxLen+1+cfg.NCtx]
		for i := range want {
			if row[i] != want[i] {
				return fmt.Errorf("maple.ctx_init: has fewer than n_ctx %d tokens (class prompts differ at position %d)", cfg.NCtx, i+1)
			}
		}
	}
	return nil
}

// Predictor implements methods.Method: the site's prompt learner on the
// frozen model, for any class names.
func (Method) Predictor(pe methods.PredictEnv, sec config.Section, saved tensor.Named) (methods.Predictor, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	if _, ok := saved[ParamCtx]; !ok {
		return nil, fmt.Errorf("maple: saved site lacks %q", ParamCtx)
	}
	words, _ := s.words()
	return predictor{pe: pe, cfg: s.config(0), words: words, saved: saved}, nil
}

type predictor struct {
	pe    methods.PredictEnv
	cfg   Config
	words string
	saved tensor.Named
}

func (p predictor) Logits(pixels []float32, B int, classes []string) ([]float32, error) {
	m := p.pe.Model
	var tokens []int
	for _, c := range classes {
		ids, err := p.pe.Tok.Tokenize(p.words+" "+strings.ReplaceAll(c, "_", " ")+".", m.W.Config.Text.ContextLength, false)
		if err != nil {
			return nil, err
		}
		tokens = append(tokens, ids...)
	}
	l, err := New(m, tokens, p.cfg)
	if err != nil {
		return nil, err
	}
	if err := prompt.Load(l.Params(), p.saved); err != nil {
		return nil, fmt.Errorf("maple: saved site: %w", err)
	}
	if err := l.Prepare(); err != nil {
		return nil, err
	}
	return l.Logits(clip.ImagePrefix(m, 1, pixels, B, nil), B)
}
