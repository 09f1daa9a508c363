// Package promptfl is the math of PromptFL (Guo et al., "PromptFL: Let
// Federated Participants Cooperatively Learn Prompts Instead of Models",
// 2023): a CoOp context learned by every client on a frozen CLIP and
// averaged by the server (FedAvg, weights n_k / Σ n), with an optional
// FedProx term.
//
// Per step, for image features I [B, E] (the frozen image encoder's output,
// cached) and the class prompts "X X … X {class}." (n_ctx "X"s):
//
//	T      = text encoder with ctx [n_ctx, D] at positions 1..n_ctx   [C, E]
//	logits = exp(logit_scale) · cos(I, T)                              [B, C]
//	loss   = CE(logits, y) + (μ/2)·‖ctx − ctx_global‖²
//
// Defaults follow the reference code (trainers/promptfl.py as shipped with
// pFedMMA, and specs/baselines.md §1–2): n_ctx 16, one context shared by all
// classes (CSC off), init N(0, 0.02²), μ 0 (plain FedAvg); the optimizer
// (SGD lr 0.001, momentum 0.9, weight decay 5e-4, batch 32) is the caller's.
package promptfl

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// ParamCtx is the reference name of the context vectors.
const ParamCtx = "prompt_learner.ctx"

// Config holds PromptFL's settings.
type Config struct {
	NCtx          int     // n_ctx: learned context tokens (16)
	ClassSpecific bool    // csc: one context per class instead of one shared (false)
	InitStd       float64 // init_std: the context is drawn N(0, InitStd²) (0.02)
	Seed          uint64  // seed of that draw
	ProxMu        float64 // prox_mu: FedProx μ; 0 is plain FedAvg
	// Position is CoOp's class_token_position: "end" (default, also ""),
	// "middle" or "front" (see prompt.NewEncoderAt).
	Position string
}

// DefaultConfig returns the reference code's defaults.
func DefaultConfig() Config { return Config{NCtx: 16, InitStd: 0.02} }

// Validate names the first bad setting.
func (c Config) Validate() error {
	switch {
	case c.NCtx < 1:
		return fmt.Errorf("promptfl: n_ctx %d: must be at least 1", c.NCtx)
	case !(c.InitStd >= 0) || math.IsInf(c.InitStd, 0):
		return fmt.Errorf("promptfl: init_std %g: must not be negative", c.InitStd)
	case !(c.ProxMu >= 0) || math.IsInf(c.ProxMu, 0):
		return fmt.Errorf("promptfl: prox_mu %g: must not be negative", c.ProxMu)
	}
	if c.Position != "" {
		if err := prompt.CheckPosition(c.Position); err != nil {
			return fmt.Errorf("promptfl: %w", err)
		}
	}
	return nil
}

// Learner trains one PromptFL context on a frozen CLIP. Several clients may
// share one Learner when they train one at a time: load a client's context
// into Params() (prompt.Load) before its steps. It is not safe for
// concurrent use.
type Learner struct {
	Cfg        Config
	LogitScale float32 // log of the logit multiplier (the model's, by default)

	enc       *prompt.Encoder
	C, E, D   int
	groups    int            // 1, or C with ClassSpecific
	ctx, grad *tensor.Tensor // [G?, n_ctx, D]
	global    []float32      // FedProx anchor (nil: no anchor set)
	ce        prompt.CosineCE
	txt       []float32 // text features of the last Step [C, E]
	evalTxt   []float32 // Prepare's text features, which Logits scores against
}

// New builds a learner for the class prompts tokens [C, Ctx] (each row the
// tokenised "X X … X {class}." with cfg.NCtx "X"s after the SOT). The
// context is drawn N(0, InitStd²) from Seed.
func New(m *clip.Model, tokens []int, cfg Config) (*Learner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pos := cfg.Position
	if pos == "" {
		pos = prompt.PositionEnd
	}
	enc, err := prompt.NewEncoderAt(m, tokens, cfg.NCtx, pos)
	if err != nil {
		return nil, fmt.Errorf("promptfl: %w", err)
	}
	l := &Learner{Cfg: cfg, LogitScale: m.W.LogitScale, enc: enc, C: enc.R, E: enc.E, D: enc.D, groups: 1}
	shape := []int{cfg.NCtx, enc.D}
	if cfg.ClassSpecific {
		l.groups = l.C
		shape = []int{l.C, cfg.NCtx, enc.D}
	}
	l.ctx, l.grad = tensor.New(shape...), tensor.New(shape...)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	for i := range l.ctx.Data {
		l.ctx.Data[i] = float32(rng.NormFloat64() * cfg.InitStd)
	}
	return l, nil
}

// Params returns the live parameters: {"prompt_learner.ctx": [n_ctx, D]}
// ([C, n_ctx, D] class-specific).
func (l *Learner) Params() tensor.Named { return tensor.Named{ParamCtx: l.ctx} }

// Grads returns the gradients of the last Step, by parameter name.
func (l *Learner) Grads() tensor.Named { return tensor.Named{ParamCtx: l.grad} }

// Shared reports whether the server averages a parameter: the context is.
func (l *Learner) Shared(name string) bool { return name == ParamCtx }

// SetGlobal sets the FedProx anchor ctx_global (the round's global context,
// copied); nil removes it (no proximal term).
func (l *Learner) SetGlobal(global tensor.Named) error {
	if global == nil {
		l.global = nil
		return nil
	}
	g, ok := global[ParamCtx]
	if !ok {
		return fmt.Errorf("promptfl: global parameters lack %q", ParamCtx)
	}
	if !tensor.SameShape(g.Shape, l.ctx.Shape) {
		return fmt.Errorf("promptfl: global %q has shape %v, want %v", ParamCtx, g.Shape, l.ctx.Shape)
	}
	l.global = append(l.global[:0], g.Data...)
	return nil
}

// Step computes the loss of image features imgFeat [B, E] (B = len(labels))
// and overwrites Grads(). It returns the loss, its terms ("loss_ce" and, with
// μ > 0 and an anchor set, "loss_prox"), and the logits [B, C] (owned by the
// learner, valid until the next Step).
func (l *Learner) Step(imgFeat []float32, labels []int) (float64, map[string]float64, []float32, error) {
	B := len(labels)
	if B == 0 {
		return 0, nil, nil, errors.New("promptfl: empty batch")
	}
	txt, err := l.enc.Forward(l.ctx.Data, l.groups, true)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("promptfl: %w", err)
	}
	l.txt = txt
	loss, logits, dTxt, err := l.ce.Loss(imgFeat, txt, B, l.C, l.E, l.LogitScale, labels)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("promptfl: %w", err)
	}
	copy(l.grad.Data, l.enc.Backward(dTxt))
	terms := map[string]float64{"loss_ce": loss}
	if l.Cfg.ProxMu > 0 && l.global != nil {
		// (μ/2)·‖w − w_g‖², gradient μ·(w − w_g)
		mu := l.Cfg.ProxMu
		var ss float64
		for i, w := range l.ctx.Data {
			d := float64(w - l.global[i])
			ss += d * d
			l.grad.Data[i] += float32(mu * d)
		}
		terms["loss_prox"] = mu / 2 * ss
		loss += terms["loss_prox"]
	}
	return loss, terms, logits, nil
}

// TextFeatures returns the raw class text features [C, E] for the current
// context (inference; owned by the learner, valid until the next call).
func (l *Learner) TextFeatures() ([]float32, error) {
	return l.enc.Forward(l.ctx.Data, l.groups, false)
}
