// Package fedotp is the math of FedOTP (Li et al., "Global and Local Prompts
// Cooperation via Optimal Transport for Federated Learning", CVPR 2024), as
// the authors' code (trainer GLP_OT) computes it: every client learns
// NumPrompt class-shared CoOp contexts on a frozen CLIP; the first AvgPrompt
// of them (the global prompt) are averaged by the server (weights n_k / Σ n),
// the rest (the local prompt) stay on the client. An image is scored against
// a class by optimal transport between its patch features and the class's N
// prompt features:
//
//	T      = text encoder with ctx[n] for every class, rows n·C + c    [N·C, E]
//	P      = every image token after ln_post @ proj, patches 1..M      [B, M, E]
//	sim    = ⟨P̂_b,m, T̂_n,c⟩, plan = ot(sim) (no gradient)            [B·C, M, N]
//	logits = exp(logit_scale) · Σ_{m,n} plan · sim                      [B, C]
//	loss   = CE(logits, y)
//
// The gradient reaches the context through sim and the text encoder only.
//
// Defaults (DefaultConfig) follow the few-shot scripts of the FedOTP
// repository: COT with ε 0.01 and top_percent 0.8 (the argparse defaults are
// ε 0.1 and top_percent 1), thresh 1e-3, max_iter 100, n_ctx 16, two prompts
// of which one is averaged, init N(0, 0.02²); see specs/baselines.md §4. The
// optimizer (SGD lr 0.001, momentum 0.9, weight decay 5e-4, batch 32) is the
// caller's.
package fedotp

import (
	"errors"
	"fmt"
	"math"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/ot"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// ParamCtx is the reference name of the contexts [NumPrompt, n_ctx, D].
const ParamCtx = "prompt_learner.ctx"

// Config holds FedOTP's settings.
type Config struct {
	NCtx      int       // n_ctx: context tokens per prompt (16)
	NumPrompt int       // num_prompt: prompts per client, N (2)
	AvgPrompt int       // avg_prompt: leading prompts the server averages (1)
	OT        ot.Config // ot, eps, thresh, max_iter, top_percent
	InitStd   float64   // init_std: contexts drawn N(0, InitStd²) (0.02)
	Seed      uint64    // seed of that draw
	// Position is CoOp's class_token_position of every prompt: "end"
	// (default, also ""), "middle" or "front" (see prompt.NewEncoderAt).
	Position string
}

// DefaultConfig returns the few-shot scripts' settings.
func DefaultConfig() Config {
	return Config{
		NCtx: 16, NumPrompt: 2, AvgPrompt: 1, InitStd: 0.02, Position: prompt.PositionEnd,
		OT: ot.Config{Method: ot.COT, Eps: 0.01, Thresh: 1e-3, MaxIter: 100, TopPercent: 0.8},
	}
}

// Validate names the first bad setting.
func (c Config) Validate() error {
	switch {
	case c.NCtx < 1:
		return fmt.Errorf("fedotp: n_ctx %d: must be at least 1", c.NCtx)
	case c.NumPrompt < 1:
		return fmt.Errorf("fedotp: num_prompt %d: must be at least 1", c.NumPrompt)
	case c.AvgPrompt < 0 || c.AvgPrompt > c.NumPrompt:
		return fmt.Errorf("fedotp: avg_prompt %d: must lie in 0..num_prompt (%d)", c.AvgPrompt, c.NumPrompt)
	case !(c.InitStd >= 0) || math.IsInf(c.InitStd, 0):
		return fmt.Errorf("fedotp: init_std %g: must not be negative", c.InitStd)
	}
	if err := c.OT.Validate(); err != nil {
		return fmt.Errorf("fedotp: %w", err)
	}
	if c.Position != "" {
		if err := prompt.CheckPosition(c.Position); err != nil {
			return fmt.Errorf("fedotp: %w", err)
		}
	}
	return nil
}

// Learner trains one client's FedOTP prompts on a frozen CLIP. It is not
// safe for concurrent use.
type Learner struct {
	Cfg        Config
	LogitScale float32 // log of the logit multiplier (the model's by default)

	enc       *prompt.Encoder
	C, E, D   int
	ctx, grad *tensor.Tensor // [N, n_ctx, D]
	head      Head
	txt       []float32 // text features of the last Step [N·C, E]
	dl        []float32 // [B, C]
}

// New builds a learner for the class prompts tokens [C, Ctx] (each row the
// tokenised "X X … X {class}." with cfg.NCtx "X"s after the SOT). The
// contexts are drawn N(0, InitStd²) from Seed.
func New(m *clip.Model, tokens []int, cfg Config) (*Learner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pos := cfg.Position
	if pos == "" {
		pos = prompt.PositionEnd
	}
	enc, err := prompt.NewMultiEncoder(m, tokens, cfg.NumPrompt, cfg.NCtx, pos)
	if err != nil {
		return nil, fmt.Errorf("fedotp: %w", err)
	}
	l := &Learner{Cfg: cfg, LogitScale: m.W.LogitScale, enc: enc, C: enc.R / cfg.NumPrompt, E: enc.E, D: enc.D}
	l.head.OT = cfg.OT
	l.ctx = tensor.New(cfg.NumPrompt, cfg.NCtx, enc.D)
	l.grad = tensor.New(cfg.NumPrompt, cfg.NCtx, enc.D)
	prompt.DrawContext(l.ctx.Data, cfg.Seed, 0x07f, cfg.InitStd)
	return l, nil
}

// Params returns the live parameters: {"prompt_learner.ctx": [N, n_ctx, D]}.
func (l *Learner) Params() tensor.Named { return tensor.Named{ParamCtx: l.ctx} }

// Grads returns the gradients of the last Step, by parameter name.
func (l *Learner) Grads() tensor.Named { return tensor.Named{ParamCtx: l.grad} }

// Shared reports whether the server receives a parameter: the contexts are,
// of which it averages only the first AvgPrompt prompts (GlobalPart,
// WithGlobal).
func Shared(name string) bool { return name == ParamCtx }

// Shared is the package's Shared, for callers holding a learner.
func (l *Learner) Shared(name string) bool { return Shared(name) }

// Step computes the loss of every-token image features imgTok [B, T, E]
// (B = len(labels); token 0 is the class token, unused) and overwrites
// Grads(). It returns the loss and the logits [B, C] (owned by the learner,
// valid until the next Step).
func (l *Learner) Step(imgTok []float32, labels []int) (float64, []float32, error) {
	B := len(labels)
	if B == 0 {
		return 0, nil, errors.New("fedotp: empty batch")
	}
	for i, y := range labels {
		if y < 0 || y >= l.C {
			return 0, nil, fmt.Errorf("fedotp: label %d of sample %d outside 0..%d", y, i, l.C-1)
		}
	}
	txt, err := l.enc.Forward(l.ctx.Data, l.Cfg.NumPrompt, true)
	if err != nil {
		return 0, nil, fmt.Errorf("fedotp: %w", err)
	}
	l.txt = txt
	logits, err := l.forwardHead(imgTok, B)
	if err != nil {
		return 0, nil, err
	}
	l.dl = growF(l.dl, B*l.C)
	loss := clip.CrossEntropy(logits, labels, B, l.C, l.dl)
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return 0, nil, fmt.Errorf("fedotp: loss is %v", loss)
	}
	copy(l.grad.Data, l.enc.Backward(l.head.Backward(l.dl)))
	return loss, logits, nil
}

func (l *Learner) forwardHead(imgTok []float32, B int) ([]float32, error) {
	if len(imgTok)%(B*l.E) != 0 {
		return nil, fmt.Errorf("fedotp: image features have %d values, not [%d, T, %d]", len(imgTok), B, l.E)
	}
	T := len(imgTok) / (B * l.E)
	return l.head.Forward(imgTok, B, T, l.txt, l.Cfg.NumPrompt, l.C, l.E, l.LogitScale)
}

// Logits scores every-token image features imgTok [B, T, E] with the current
// prompts (inference): [B, C], owned by the learner.
func (l *Learner) Logits(imgTok []float32, B int) ([]float32, error) {
	if B < 1 {
		return nil, errors.New("fedotp: empty batch")
	}
	txt, err := l.enc.Forward(l.ctx.Data, l.Cfg.NumPrompt, false)
	if err != nil {
		return nil, fmt.Errorf("fedotp: %w", err)
	}
	l.txt = txt
	return l.forwardHead(imgTok, B)
}

// Plan returns the transport plans of the last Step or Logits call
// [B·C, M, N] (owned by the learner).
func (l *Learner) Plan() []float32 { return l.head.Plan() }

// TextFeatures returns the raw text features of the last Step or Logits
// call [N·C, E] (owned by the learner).
func (l *Learner) TextFeatures() []float32 { return l.txt }

// GlobalPart returns what the server averages from a client's parameters:
// the first avg prompts of the contexts, {"prompt_learner.ctx": [avg, n_ctx, D]}
// (a copy).
func GlobalPart(params tensor.Named, avg int) (tensor.Named, error) {
	c, ok := params[ParamCtx]
	if !ok {
		return nil, fmt.Errorf("fedotp: parameters lack %q", ParamCtx)
	}
	if len(c.Shape) != 3 || avg < 0 || avg > c.Shape[0] {
		return nil, fmt.Errorf("fedotp: %q has shape %v; cannot take %d global prompts", ParamCtx, c.Shape, avg)
	}
	n := avg * c.Shape[1] * c.Shape[2]
	return tensor.Named{ParamCtx: {Shape: []int{avg, c.Shape[1], c.Shape[2]}, Data: append([]float32(nil), c.Data[:n]...)}}, nil
}

// WithGlobal returns what a client continues from: the global prompts
// [avg, n_ctx, D] followed by the client's own remaining prompts (a copy).
func WithGlobal(own, global tensor.Named) (tensor.Named, error) {
	c, ok := own[ParamCtx]
	if !ok {
		return nil, fmt.Errorf("fedotp: client parameters lack %q", ParamCtx)
	}
	g, ok := global[ParamCtx]
	if !ok {
		return nil, fmt.Errorf("fedotp: global parameters lack %q", ParamCtx)
	}
	if len(c.Shape) != 3 || len(g.Shape) != 3 || g.Shape[0] > c.Shape[0] || g.Shape[1] != c.Shape[1] || g.Shape[2] != c.Shape[2] {
		return nil, fmt.Errorf("fedotp: global %q has shape %v, client's %v", ParamCtx, g.Shape, c.Shape)
	}
	out := c.Clone()
	copy(out.Data, g.Data)
	return tensor.Named{ParamCtx: out}, nil
}

func growF(buf []float32, n int) []float32 {
	if cap(buf) >= n {
		return buf[:n]
	}
	return make([]float32, n)
}
