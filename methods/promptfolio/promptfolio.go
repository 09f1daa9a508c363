// Package promptfolio is the math of PromptFolio (Pan et al., "Federated
// Learning from Vision-Language Foundation Models: Theoretical Analysis and
// Method", NeurIPS 2024) as the authors' code (PanBikang/PromptFolio,
// trainers/PromptFolio.py) computes it: every client learns two CoOp
// contexts on a frozen CLIP, prompt 0 the global one (averaged by the
// server, weights n_i / Σ n over the clients of the round) and prompt 1 the
// local one (kept by the client); their text features are mixed by the
// portfolio weight θ:
//
//	T0, T1 = text encoder with ctx[0], ctx[1] for every class        [C, E] each
//	t      = (1 − θ)·T0/|T0| + θ·T1/|T1|   (not renormalised)         [C, E]
//	logits = exp(logit_scale) · (I/|I|) · tᵀ                          [B, C]
//	loss   = CE(logits, y)
//
// so ∂loss/∂ctx[0] carries the factor 1 − θ and ∂loss/∂ctx[1] the factor θ:
// θ = 0 is PromptFL (the local prompt receives no gradient), θ = 1 is CoOp
// trained locally (the global prompt receives none). Because t is not
// renormalised the mixed classifier's scale shrinks with the angle between
// T0 and T1, as in the code.
//
// Defaults: n_ctx 8 and θ 0.4 (the code's argparse --n_ctx and --frac_p),
// init N(0, 0.02²). The reference's aggregation indexes the selected
// clients' prompts by client id (weights permuted whenever the clients do
// not come in the order 0, 1, …; wrong entries under partial
// participation); here the server takes Σ n_i/n · p_i over the clients of
// the round. See specs/promptfolio.md.
package promptfolio

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/nn"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// ParamCtx is the reference name of the two contexts [2, n_ctx, D]: prompt 0
// global, prompt 1 local.
const ParamCtx = "prompt_learner.ctx"

// numPrompt is the number of prompts: the global and the local one.
const numPrompt = 2

// Config holds PromptFolio's settings.
type Config struct {
	NCtx    int     // n_ctx: context tokens per prompt (8)
	Theta   float64 // θ, the portfolio weight of the local prompt (0.4)
	InitStd float64 // init_std: contexts drawn N(0, InitStd²) (0.02)
	Seed    uint64  // seed of that draw
}

// DefaultConfig returns the code's defaults (argparse --n_ctx 8, --frac_p 0.4).
func DefaultConfig() Config { return Config{NCtx: 8, Theta: 0.4, InitStd: 0.02} }

// Validate names the first bad setting.
func (c Config) Validate() error {
	switch {
	case c.NCtx < 1:
		return fmt.Errorf("promptfolio: n_ctx %d: must be at least 1", c.NCtx)
	case !(c.Theta >= 0 && c.Theta <= 1):
		return fmt.Errorf("promptfolio: theta %g: must lie in [0, 1]", c.Theta)
	case !(c.InitStd >= 0):
		return fmt.Errorf("promptfolio: init_std %g: must not be negative", c.InitStd)
	}
	return nil
}

// Learner trains one client's PromptFolio prompts on a frozen CLIP. Several
// clients may share one Learner when they train one at a time (load a
// client's contexts into Params() first). It is not safe for concurrent use.
type Learner struct {
	Cfg        Config
	LogitScale float32 // log of the logit multiplier (the model's by default)

	enc       *prompt.Encoder
	C, E, D   int
	ctx, grad *tensor.Tensor // [2, n_ctx, D]
	head      mixHead
	txt       []float32 // raw text features of the last Step or Prepare [2·C, E]
	dl        []float32 // [B, C] gradient of the loss with respect to the logits
}

// New builds a learner for the class prompts tokens [C, Ctx] (each row the
// tokenised "X X … X {class}." with cfg.NCtx "X"s after the SOT). The two
// contexts are drawn N(0, InitStd²) from Seed.
func New(m *clip.Model, tokens []int, cfg Config) (*Learner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// rows prompt-major: row n·C + c is prompt n with class c
	rows := make([]int, 0, numPrompt*len(tokens))
	for range numPrompt {
		rows = append(rows, tokens...)
	}
	enc, err := prompt.NewEncoder(m, rows, cfg.NCtx)
	if err != nil {
		return nil, fmt.Errorf("promptfolio: %w", err)
	}
	l := &Learner{Cfg: cfg, LogitScale: m.W.LogitScale, enc: enc, C: enc.R / numPrompt, E: enc.E, D: enc.D}
	l.ctx, l.grad = tensor.New(numPrompt, cfg.NCtx, enc.D), tensor.New(numPrompt, cfg.NCtx, enc.D)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0xf0110))
	for i := range l.ctx.Data {
		l.ctx.Data[i] = float32(rng.NormFloat64() * cfg.InitStd)
	}
	return l, nil
}

// Params returns the live parameters: {"prompt_learner.ctx": [2, n_ctx, D]}.
func (l *Learner) Params() tensor.Named { return tensor.Named{ParamCtx: l.ctx} }

// Grads returns the gradients of the last Step, by parameter name.
func (l *Learner) Grads() tensor.Named { return tensor.Named{ParamCtx: l.grad} }

// Shared reports whether the server receives a parameter: the contexts are,
// of which it averages only prompt 0 (GlobalPart, WithGlobal).
func (l *Learner) Shared(name string) bool { return name == ParamCtx }

// Step computes the loss of image features img [B, E] (B = len(labels)) and
// overwrites Grads(). It returns the loss, no extra terms, and the logits
// [B, C] (owned by the learner, valid until the next Step).
func (l *Learner) Step(img []float32, labels []int) (float64, map[string]float64, []float32, error) {
	B := len(labels)
	if B == 0 {
		return 0, nil, nil, errors.New("promptfolio: empty batch")
	}
	if len(img) != B*l.E {
		return 0, nil, nil, fmt.Errorf("promptfolio: image features have %d values, want %d × %d", len(img), B, l.E)
	}
	for i, y := range labels {
		if y < 0 || y >= l.C {
			return 0, nil, nil, fmt.Errorf("promptfolio: label %d of sample %d outside 0..%d", y, i, l.C-1)
		}
	}
	txt, err := l.enc.Forward(l.ctx.Data, numPrompt, true)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("promptfolio: %w", err)
	}
	l.txt = txt
	logits := l.head.Forward(img, txt, B, l.C, l.E, l.Cfg.Theta, l.LogitScale)
	l.dl = nn.Grow(l.dl, B*l.C)
	loss := clip.CrossEntropy(logits, labels, B, l.C, l.dl)
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return 0, nil, nil, fmt.Errorf("promptfolio: loss is %v", loss)
	}
	copy(l.grad.Data, l.enc.Backward(l.head.Backward(l.dl)))
	return loss, nil, logits, nil
}

// Prepare computes the text features of the current contexts (inference)
// for Logits.
func (l *Learner) Prepare() error {
	txt, err := l.enc.Forward(l.ctx.Data, numPrompt, false)
	if err != nil {
		return fmt.Errorf("promptfolio: %w", err)
	}
	l.txt = txt
	l.head.Mix(txt, l.C, l.E, l.Cfg.Theta)
	return nil
}

// Logits scores image features img [B, E] against the mixed classifier of
// the last Prepare: [B, C] (owned by the learner).
func (l *Learner) Logits(img []float32, B int) ([]float32, error) {
	if B < 1 || len(img) != B*l.E {
		return nil, fmt.Errorf("promptfolio: image features have %d values, not [%d, %d]", len(img), B, l.E)
	}
	if len(l.head.t) != l.C*l.E {
		return nil, errors.New("promptfolio: Logits before Prepare")
	}
	return l.head.Scores(img, B, l.LogitScale), nil
}

// TextFeatures returns the raw text features of the last Step or Prepare,
// [2·C, E] prompt-major (owned by the learner).
func (l *Learner) TextFeatures() []float32 { return l.txt }

// Mixed returns the mixed classifier t of the last Step or Prepare [C, E]
// (owned by the learner).
func (l *Learner) Mixed() []float32 { return l.head.t }

// mixHead is PromptFolio's classifier: the portfolio mix of the two prompts'
// normalised text features and the scaled dot product with the normalised
// image features.
type mixHead struct {
	C, E, B     int
	theta, s    float32
	that, norms []float32 // [2C, E] normalised text features, [2C] their norms
	t           []float32 // [C, E] the mix
	ximg, normI []float32 // [B, E] normalised image features, [B] norms
	logits      []float32 // [B, C]
	dt, dthat   []float32 // [C, E], [2C, E]
	dtxt        []float32 // [2C, E]
}

// Mix computes t = (1 − θ)·T0/|T0| + θ·T1/|T1| from txt [2C, E].
func (h *mixHead) Mix(txt []float32, C, E int, theta float64) {
	h.C, h.E, h.theta = C, E, float32(theta)
	h.that = append(h.that[:0], txt[:2*C*E]...)
	h.norms = clip.Normalize(h.that, 2*C, E)
	h.t = nn.Grow(h.t, C*E)
	a, b := 1-h.theta, h.theta
	for i := range h.t {
		h.t[i] = a*h.that[i] + b*h.that[C*E+i]
	}
}

// Scores returns exp(logitScale)·(x/|x|)·tᵀ [B, C] for img [B, E] and the
// mix of the last Mix.
func (h *mixHead) Scores(img []float32, B int, logitScale float32) []float32 {
	C, E := h.C, h.E
	h.B, h.s = B, float32(math.Exp(float64(logitScale)))
	h.ximg = append(h.ximg[:0], img[:B*E]...)
	h.normI = clip.Normalize(h.ximg, B, E)
	h.logits = nn.Grow(h.logits, B*C)
	for i := 0; i < B; i++ {
		x := h.ximg[i*E : (i+1)*E]
		for c := 0; c < C; c++ {
			var dot float32
			for k, v := range h.t[c*E : (c+1)*E] {
				dot += x[k] * v
			}
			h.logits[i*C+c] = h.s * dot
		}
	}
	return h.logits
}

// Forward is Mix then Scores: the logits [B, C] of img [B, E] against the
// prompts' raw text features txt [2C, E].
func (h *mixHead) Forward(img, txt []float32, B, C, E int, theta float64, logitScale float32) []float32 {
	h.Mix(txt, C, E, theta)
	return h.Scores(img, B, logitScale)
}

// Backward takes dlogits [B, C] and returns the gradient with respect to
// the raw text features [2C, E] (owned by h): the images are frozen.
//
//	dt    = s · dlogitsᵀ · x̂                       [C, E]
//	dT̂0   = (1 − θ)·dt,  dT̂1 = θ·dt
//	dT_n  = (dT̂_n − T̂_n (T̂_n·dT̂_n)) / |T_n|
func (h *mixHead) Backward(dlogits []float32) []float32 {
	B, C, E := h.B, h.C, h.E
	h.dt = nn.Grow(h.dt, C*E)
	clear(h.dt)
	for i := 0; i < B; i++ {
		x := h.ximg[i*E : (i+1)*E]
		for c := 0; c < C; c++ {
			g := h.s * dlogits[i*C+c]
			d := h.dt[c*E : (c+1)*E]
			for k, v := range x {
				d[k] += g * v
			}
		}
	}
	h.dthat = nn.Grow(h.dthat, 2*C*E)
	a, b := 1-h.theta, h.theta
	for i, v := range h.dt {
		h.dthat[i], h.dthat[C*E+i] = a*v, b*v
	}
	h.dtxt = nn.Grow(h.dtxt, 2*C*E)
	clip.NormBackward(h.dtxt, h.dthat, h.that, h.norms, 2*C, E)
	return h.dtxt
}

// GlobalPart returns what a client uploads: prompt 0 of the contexts,
// {"prompt_learner.ctx": [1, n_ctx, D]} (a copy).
func GlobalPart(params tensor.Named) (tensor.Named, error) {
	c, ok := params[ParamCtx]
	if !ok {
		return nil, fmt.Errorf("promptfolio: parameters lack %q", ParamCtx)
	}
	if len(c.Shape) != 3 || c.Shape[0] != numPrompt {
		return nil, fmt.Errorf("promptfolio: %q has shape %v, want [2, n_ctx, width]", ParamCtx, c.Shape)
	}
	n := c.Shape[1] * c.Shape[2]
	return tensor.Named{ParamCtx: {Shape: []int{1, c.Shape[1], c.Shape[2]}, Data: append([]float32(nil), c.Data[:n]...)}}, nil
}

// WithGlobal returns where a client continues from: the global prompt
// [1, n_ctx, D] followed by the client's own local prompt (a copy).
func WithGlobal(own, global tensor.Named) (tensor.Named, error) {
	c, ok := own[ParamCtx]
	if !ok {
		return nil, fmt.Errorf("promptfolio: client parameters lack %q", ParamCtx)
	}
	g, ok := global[ParamCtx]
	if !ok {
		return nil, fmt.Errorf("promptfolio: global parameters lack %q", ParamCtx)
	}
	if len(c.Shape) != 3 || c.Shape[0] != numPrompt || !tensor.SameShape(g.Shape, []int{1, c.Shape[1], c.Shape[2]}) {
		return nil, fmt.Errorf("promptfolio: global %q has shape %v, client's %v", ParamCtx, g.Shape, c.Shape)
	}
	out := c.Clone()
	copy(out.Data, g.Data)
	return tensor.Named{ParamCtx: out}, nil
}
