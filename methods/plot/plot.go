// Package plot is PLOT (Chen et al., "PLOT: Prompt Learning with Optimal
// Transport for Vision-Language Models", ICLR 2023) as the authors' code
// (github CHENGY12/PLOT, plot-coop/trainers/plot.py) computes it: N CoOp
// contexts shared by the classes on a frozen CLIP; an image is scored
// against a class by optimal transport between its local features (the
// patch tokens) and the class's N prompt features:
//
//	T      = text encoder with ctx[n] for every class, rows n·C + c      [N·C, E]
//	P      = every image token after ln_post @ proj (ViT) or the attention
//	         pool's output at every token (ResNet), locals 1..M          [B, 1+M, E]
//	sim    = ⟨P̂_b,m, T̂_n·C+c⟩                                           [B·C, M, N]
//	plan   = Sinkhorn(sim), ε 0.1, a = 1/M, b = 1/N (no gradient)         [B·C, M, N]
//	logits = e^s · Σ_{m,n} plan · sim                                     [B, C]
//	       (+ e^s · ⟨P̂_b,0, normalise(mean_n T_n·C+c)⟩ on ImageNet: GlobalLogit)
//	loss   = CE(logits, y)
//
// This is the two-stage optimisation of the paper: the inner stage (the
// plan, Sinkhorn under no_grad) and the outer stage (the prompts, by SGD
// with the plan held constant). The maths of the local head is FedOTP's
// balanced case (PLOT is FedOTP's ancestor), so the head is
// fedotp.Head with ot.Sinkhorn; the solver is package ot.
//
// Defaults (DefaultConfig): N 4, n_ctx 16 (their scripts), ε 0.1, thresh
// 0.01, max_iter 100 (hard-coded in their CustomCLIP), init N(0, 0.02²).
// The server averages all N contexts (FLiP averages its prompt learner).
package plot

import (
	"errors"
	"fmt"
	"math"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/methods/fedotp"
	"github.com/pfedmma/pfedmma/nn"
	"github.com/pfedmma/pfedmma/ot"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// ParamCtx is the reference name of the contexts [N, n_ctx, D].
const ParamCtx = "prompt_learner.ctx"

// Config holds PLOT's settings.
type Config struct {
	NCtx    int     // n_ctx: context tokens per prompt (16)
	N       int     // N: prompts per class (4)
	Eps     float64 // Sinkhorn's entropic regulariser ε (0.1)
	Thresh  float64 // stop once the batch-mean change of r is below it (0.01)
	MaxIter int     // Sinkhorn iterations at most (100)
	InitStd float64 // contexts drawn N(0, InitStd²) (0.02)
	Seed    uint64  // seed of that draw
	// GlobalLogit adds the global branch of their ImageNet path: e^s ·
	// cos(global image token, normalised mean of the N raw text features).
	GlobalLogit bool
}

// DefaultConfig returns the authors' settings.
func DefaultConfig() Config {
	return Config{NCtx: 16, N: 4, Eps: 0.1, Thresh: 0.01, MaxIter: 100, InitStd: 0.02}
}

// OT returns the solver's settings: the balanced Sinkhorn.
func (c Config) OT() ot.Config {
	return ot.Config{Method: ot.Sinkhorn, Eps: c.Eps, Thresh: c.Thresh, MaxIter: c.MaxIter, TopPercent: 1}
}

// Validate names the first bad setting.
func (c Config) Validate() error {
	switch {
	case c.NCtx < 1:
		return fmt.Errorf("plot: n_ctx %d: must be at least 1", c.NCtx)
	case c.N < 1:
		return fmt.Errorf("plot: n_prompts %d: must be at least 1", c.N)
	case !(c.InitStd >= 0) || math.IsInf(c.InitStd, 0):
		return fmt.Errorf("plot: init_std %g: must not be negative", c.InitStd)
	}
	if err := c.OT().Validate(); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

// Learner trains one client's N PLOT prompts on a frozen CLIP. It is not
// safe for concurrent use.
type Learner struct {
	Cfg        Config
	LogitScale float32 // log of the logit multiplier (the model's by default)

	enc       *prompt.Encoder
	C, E, D   int
	ctx, grad *tensor.Tensor // [N, n_ctx, D]
	local     fedotp.Head    // the OT head on the local tokens
	global    globalHead     // the ImageNet branch (GlobalLogit)
	txt       []float32      // raw text features of the last forward [N·C, E]
	logits    []float32      // [B, C]
	dl        []float32      // [B, C]
}

// New builds a learner for the class prompts tokens [C, Ctx] (each row the
// tokenised "X X … X {class}." with cfg.NCtx "X"s after the SOT). The
// contexts are drawn N(0, InitStd²) from Seed.
func New(m *clip.Model, tokens []int, cfg Config) (*Learner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	enc, err := prompt.NewMultiEncoder(m, tokens, cfg.N, cfg.NCtx, prompt.PositionEnd)
	if err != nil {
		return nil, fmt.Errorf("plot: %w", err)
	}
	l := &Learner{Cfg: cfg, LogitScale: m.W.LogitScale, enc: enc, C: enc.R / cfg.N, E: enc.E, D: enc.D}
	l.local.OT = cfg.OT()
	l.ctx = tensor.New(cfg.N, cfg.NCtx, enc.D)
	l.grad = tensor.New(cfg.N, cfg.NCtx, enc.D)
	// their N(0, 0.02²) draw of the N contexts together
	prompt.DrawContext(l.ctx.Data, cfg.Seed, 0x9107, cfg.InitStd)
	return l, nil
}

// Params returns the live parameters: {"prompt_learner.ctx": [N, n_ctx, D]}.
func (l *Learner) Params() tensor.Named { return tensor.Named{ParamCtx: l.ctx} }

// Grads returns the gradients of the last Step, by parameter name.
func (l *Learner) Grads() tensor.Named { return tensor.Named{ParamCtx: l.grad} }

// Step computes the loss of every-token image features imgTok [B, 1+M, E]
// (B = len(labels); token 0 global, 1..M local) and overwrites Grads(). It
// returns the loss and the logits [B, C] (owned by the learner, valid until
// the next call).
func (l *Learner) Step(imgTok []float32, labels []int) (float64, []float32, error) {
	B := len(labels)
	if B == 0 {
		return 0, nil, errors.New("plot: empty batch")
	}
	for i, y := range labels {
		if y < 0 || y >= l.C {
			return 0, nil, fmt.Errorf("plot: label %d of sample %d outside 0..%d", y, i, l.C-1)
		}
	}
	if err := l.textForward(true); err != nil {
		return 0, nil, err
	}
	logits, err := l.headForward(imgTok, B)
	if err != nil {
		return 0, nil, err
	}
	l.dl = nn.Grow(l.dl, B*l.C)
	loss := clip.CrossEntropy(logits, labels, B, l.C, l.dl)
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return 0, nil, fmt.Errorf("plot: loss is %v", loss)
	}
	copy(l.grad.Data, l.enc.Backward(l.headBackward(l.dl)))
	return loss, logits, nil
}

// textForward runs the text encoder on the N contexts: txt [N·C, E].
func (l *Learner) textForward(train bool) error {
	txt, err := l.enc.Forward(l.ctx.Data, l.Cfg.N, train)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	l.txt = append(l.txt[:0], txt...)
	return nil
}

// headForward scores imgTok [B, T, E] against l.txt: logits [B, C].
func (l *Learner) headForward(imgTok []float32, B int) ([]float32, error) {
	if len(imgTok)%(B*l.E) != 0 {
		return nil, fmt.Errorf("plot: image features have %d values, not [%d, T, %d]", len(imgTok), B, l.E)
	}
	T := len(imgTok) / (B * l.E)
	loc, err := l.local.Forward(imgTok, B, T, l.txt, l.Cfg.N, l.C, l.E, l.LogitScale)
	if err != nil {
		return nil, fmt.Errorf("plot: %w", err)
	}
	l.logits = append(l.logits[:0], loc...)
	if l.Cfg.GlobalLogit {
		l.global.Forward(l.logits, imgTok, B, T, l.txt, l.Cfg.N, l.C, l.E, l.LogitScale)
	}
	return l.logits, nil
}

// headBackward takes dlogits [B, C] and returns ∂L/∂txt [N·C, E].
func (l *Learner) headBackward(dlogits []float32) []float32 {
	dtxt := l.local.Backward(dlogits)
	if l.Cfg.GlobalLogit {
		l.global.Backward(dtxt, dlogits)
	}
	return dtxt
}

// Logits scores every-token image features imgTok [B, 1+M, E] with the
// current prompts (inference): [B, C], owned by the learner.
func (l *Learner) Logits(imgTok []float32, B int) ([]float32, error) {
	if B < 1 {
		return nil, errors.New("plot: empty batch")
	}
	if err := l.textForward(false); err != nil {
		return nil, err
	}
	return l.headForward(imgTok, B)
}

// Plan returns the transport plans of the last forward [B·C, M, N] (owned
// by the learner).
func (l *Learner) Plan() []float32 { return l.local.Plan() }

// Iterations returns the Sinkhorn iterations of the last forward.
func (l *Learner) Iterations() int { return l.local.Solve().Iters }

// TextFeatures returns the raw text features of the last forward [N·C, E]
// (owned by the learner).
func (l *Learner) TextFeatures() []float32 { return l.txt }
