// Package kgcoop is KgCoOp (Yao et al., "Visual-Language Prompt Tuning with
// Knowledge-guided Context Optimization", CVPR 2023) run federated as FLiP
// and PMFLT do: a CoOp context trained by every client on a frozen CLIP with
// a pull towards the hand-crafted prompts' text features, averaged by the
// server (FedAvg, weights n_k / Σ n).
//
// Per step, for raw image features I [B, E] (cached), the class prompts
// "<ctx words> {class}." and the hand-crafted prompts ("a photo of a
// {class}.", the run's template) encoded once by the frozen CLIP, F [C, E]:
//
//	T      = text encoder with ctx [n_ctx, D] at positions 1..n_ctx  [C, E]
//	logits = exp(logit_scale) · cos(I, T)                            [B, C]
//	score  = 1 − mean_c cos(T_c, F_c)
//	loss   = CE(logits, y) + w · score
//
// Defaults follow the authors' trainers/kgcoop.py and configs
// (vit_b16_ep100_ctxv1, scripts/base2new_train.sh): the context initialised
// from "a photo of a" (n_ctx 4), w = 8; the optimizer (SGD lr 0.002,
// momentum 0.9, weight decay 5e-4, batch 128 in their config) is the caller's.
package kgcoop

import (
	"errors"
	"fmt"
	"math"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/nn"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// ParamCtx is the reference name of the context vectors.
const ParamCtx = "prompt_learner.ctx"

// Config holds KgCoOp's settings.
type Config struct {
	NCtx    int     // n_ctx: learned context tokens (4)
	W       float64 // w: weight λ of the pull term (8)
	InitStd float64 // init_std: the context is drawn N(0, InitStd²) without init words (0.02)
	Seed    uint64  // seed of that draw
	InitCtx []float32
}

// Validate names the first bad setting.
func (c Config) Validate() error {
	switch {
	case c.NCtx < 1:
		return fmt.Errorf("kgcoop: n_ctx %d: must be at least 1", c.NCtx)
	case c.W < 0:
		return fmt.Errorf("kgcoop: w %g: must not be negative", c.W)
	case c.InitStd < 0:
		return fmt.Errorf("kgcoop: init_std %g: must not be negative", c.InitStd)
	}
	return nil
}

// Learner trains one KgCoOp context for one class list. It is not safe for
// concurrent use.
type Learner struct {
	Cfg        Config
	LogitScale float32

	enc       *prompt.Encoder
	C, E, D   int
	ctx, grad *tensor.Tensor // [n_ctx, D]
	target    []float32      // hand-crafted prompts' text features [C, E] (raw)
	ce        prompt.CosineCE
	txt, cos  []float32
	dTxt      []float32
	evalTxt   []float32 // Prepare's text features, which Logits scores against
}

// New builds a learner for the class prompts tokens [C, Ctx] (context
// placeholders at positions 1..NCtx) and the hand-crafted prompts template
// [C, Ctx], encoded once by the frozen model.
func New(m *clip.Model, tokens, template []int, cfg Config) (*Learner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	enc, target, err := prompt.NewTeacher(m, tokens, template, cfg.NCtx)
	if err != nil {
		return nil, fmt.Errorf("kgcoop: %w", err)
	}
	l := &Learner{Cfg: cfg, LogitScale: m.W.LogitScale, enc: enc, C: enc.R, E: enc.E, D: enc.D,
		ctx: tensor.New(cfg.NCtx, enc.D), grad: tensor.New(cfg.NCtx, enc.D), target: target}
	if err := prompt.FillContext(l.ctx.Data, cfg.InitCtx, cfg.NCtx, enc.D, cfg.Seed, 0x6bc0, cfg.InitStd); err != nil {
		return nil, fmt.Errorf("kgcoop: %w", err)
	}
	return l, nil
}

// Params returns the live parameters: {"prompt_learner.ctx": [n_ctx, D]}.
func (l *Learner) Params() tensor.Named { return tensor.Named{ParamCtx: l.ctx} }

// Grads returns the gradients of the last Step.
func (l *Learner) Grads() tensor.Named { return tensor.Named{ParamCtx: l.grad} }

// Shared reports whether the server averages a parameter: the context is.
func (l *Learner) Shared(name string) bool { return name == ParamCtx }

// Target returns the hand-crafted prompts' raw text features [C, E].
func (l *Learner) Target() []float32 { return l.target }

// Step computes the loss of raw image features imgFeat [B, E] and
// overwrites Grads(). It returns the loss, its terms ("loss_ce", "score":
// 1 − mean cos, "loss_kg": w·score) and the logits [B, C].
func (l *Learner) Step(imgFeat []float32, labels []int) (float64, map[string]float64, []float32, error) {
	B, C, E := len(labels), l.C, l.E
	if B == 0 {
		return 0, nil, nil, errors.New("kgcoop: empty batch")
	}
	txt, err := l.enc.Forward(l.ctx.Data, 1, true)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("kgcoop: %w", err)
	}
	l.txt = append(l.txt[:0], txt...)
	ce, logits, dTxt, err := l.ce.Loss(imgFeat, txt, B, C, E, l.LogitScale, labels)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("kgcoop: %w", err)
	}
	l.dTxt = append(l.dTxt[:0], dTxt...)
	// score = 1 − mean_c cos(T_c, F_c);  ∂(w·score)/∂cos_c = −w/C
	l.cos = nn.Grow(l.cos, C)
	prompt.Cosines(l.cos, l.txt, l.target, C, E)
	var mean float64
	for _, c := range l.cos {
		mean += float64(c)
	}
	score := 1 - mean/float64(C)
	dcos := make([]float32, C)
	for i := range dcos {
		dcos[i] = float32(-l.Cfg.W / float64(C))
	}
	prompt.CosinesBackward(l.dTxt, nil, dcos, l.txt, l.target, C, E)
	copy(l.grad.Data, l.enc.Backward(l.dTxt))
	loss := ce + l.Cfg.W*score
	return loss, map[string]float64{"loss_ce": ce, "score": score, "loss_kg": l.Cfg.W * score}, logits, nil
}

// TextFeatures returns the raw class text features [C, E] for the current
// context (inference; owned by the learner's encoder).
func (l *Learner) TextFeatures() ([]float32, error) { return l.enc.Forward(l.ctx.Data, 1, false) }

// Intermediates returns the text features, the cosines to the hand-crafted
// features [C] of the last Step and the hand-crafted features.
func (l *Learner) Intermediates() tensor.Named {
	return tensor.Named{
		"text_features":     {Shape: []int{l.C, l.E}, Data: append([]float32(nil), l.txt...)},
		"cos":               {Shape: []int{l.C}, Data: append([]float32(nil), l.cos...)},
		"template_features": {Shape: []int{l.C, l.E}, Data: normalized(l.target, l.C, l.E)},
	}
}

// normalized returns the rows of x [R, E] divided by their norms.
func normalized(x []float32, R, E int) []float32 {
	out := make([]float32, R*E)
	for r := 0; r < R; r++ {
		var ss float64
		for _, v := range x[r*E : (r+1)*E] {
			ss += float64(v) * float64(v)
		}
		inv := 1 / math.Sqrt(ss)
		for k, v := range x[r*E : (r+1)*E] {
			out[r*E+k] = float32(float64(v) * inv)
		}
	}
	return out
}
