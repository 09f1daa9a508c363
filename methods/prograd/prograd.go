// Package prograd is ProGrad (Zhu et al., "Prompt-aligned Gradient for
// Prompt Tuning", ICCV 2023) run federated as FLiP lists it: a CoOp context
// trained by every client on a frozen CLIP, its cross-entropy gradient
// projected away from the direction that conflicts with the zero-shot
// teacher's, averaged by the server (FedAvg, weights n_k / Σ n).
//
// Per step, for raw image features I [B, E] (cached) and the hand-crafted
// prompts' text features F [C, E] (the run's template, encoded once by the
// frozen CLIP: the zero-shot teacher), as the authors' code computes it
// (BeierZhu/Prompt-align trainers/prograd.py and their Dassl fork's
// TrainerBase.prograd_backward_and_update):
//
//	T       = text encoder with ctx [n_ctx, D] at positions 1..n_ctx  [C, E]
//	logits  = exp(logit_scale) · cos(I, T)                            [B, C]
//	zs      = exp(logit_scale) · cos(I, F)                            [B, C]
//	xe      = CE(logits, y)
//	kl      = T_d² · mean_b Σ_c −softmax(zs/T_d)_c · log softmax(logits/T_d)_c
//	G_ce    = ∂xe/∂ctx,  G_kd = ∂kl/∂ctx
//	g       = G_ce − λ·(G_ce·G_kd / |G_kd|²)·G_kd   if G_ce·G_kd < 0
//	        = G_ce                                  otherwise
//
// The optimizer steps along g; the reported loss is xe (their summary's).
// Defaults follow the authors' scripts: T_d 1, λ 1, the context initialised
// from "a photo of a" (CTX_INIT), n_ctx 16 (zero rows before the words).
package prograd

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

// Config holds ProGrad's settings.
type Config struct {
	NCtx    int     // n_ctx: learned context tokens
	T       float64 // T: distillation temperature (1)
	Lambda  float64 // λ: how much of the conflicting component is removed (1)
	InitStd float64 // init_std: N(0, InitStd²) context without init words (0.02)
	Seed    uint64  // seed of that draw
	InitCtx []float32
}

// Validate names the first bad setting.
func (c Config) Validate() error {
	switch {
	case c.NCtx < 1:
		return fmt.Errorf("prograd: n_ctx %d: must be at least 1", c.NCtx)
	case !(c.T > 0) || math.IsInf(c.T, 0):
		return fmt.Errorf("prograd: T %g: must be positive and finite", c.T)
	case !(c.Lambda >= 0) || math.IsInf(c.Lambda, 0):
		return fmt.Errorf("prograd: lambda %g: must be non-negative and finite", c.Lambda)
	case !(c.InitStd >= 0):
		return fmt.Errorf("prograd: init_std %g: must not be negative", c.InitStd)
	}
	return nil
}

// Learner trains one ProGrad context for one class list. It is not safe for
// concurrent use.
type Learner struct {
	Cfg        Config
	LogitScale float32

	enc       *prompt.Encoder
	C, E, D   int
	ctx, grad *tensor.Tensor // [n_ctx, D]
	teacher   []float32      // hand-crafted prompts' raw text features [C, E]
	head      clip.CosineLogits

	txt, logits, zs []float32 // [C, E], [B, C], [B, C] of the last Step
	dlXe, dlKl      []float32 // [B, C]
	dImg, dTxt      []float32 // scratch [B, E], [C, E]
	gXe, gKd        []float32 // [n_ctx·D]
	xe, kl, cos     float64
	projected       bool
	evalTxt         []float32 // Prepare's text features, which Logits scores against
}

// New builds a learner for the class prompts tokens [C, Ctx] (context
// placeholders at positions 1..NCtx) and the teacher's hand-crafted prompts
// template [C, Ctx], encoded once by the frozen model.
func New(m *clip.Model, tokens, template []int, cfg Config) (*Learner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	enc, teacher, err := prompt.NewTeacher(m, tokens, template, cfg.NCtx)
	if err != nil {
		return nil, fmt.Errorf("prograd: %w", err)
	}
	l := &Learner{Cfg: cfg, LogitScale: m.W.LogitScale, enc: enc, C: enc.R, E: enc.E, D: enc.D,
		ctx: tensor.New(cfg.NCtx, enc.D), grad: tensor.New(cfg.NCtx, enc.D), teacher: teacher}
	if err := prompt.FillContext(l.ctx.Data, cfg.InitCtx, cfg.NCtx, enc.D, cfg.Seed, 0x960d, cfg.InitStd); err != nil {
		return nil, fmt.Errorf("prograd: %w", err)
	}
	return l, nil
}

// Params returns the live parameters: {"prompt_learner.ctx": [n_ctx, D]}.
func (l *Learner) Params() tensor.Named { return tensor.Named{ParamCtx: l.ctx} }

// Grads returns the update direction g of the last Step (the projected
// cross-entropy gradient).
func (l *Learner) Grads() tensor.Named { return tensor.Named{ParamCtx: l.grad} }

// Step computes the losses of raw image features img [B, E], both
// gradients and the update direction, which overwrites Grads(). It returns
// the cross entropy (the loss the authors report), the terms ("loss_xe",
// "loss_kl", "cos" of G_ce and G_kd, "projected" 0 or 1) and the logits
// [B, C] (owned by the learner).
func (l *Learner) Step(img []float32, labels []int) (float64, map[string]float64, []float32, error) {
	B, C, E := len(labels), l.C, l.E
	if B == 0 {
		return 0, nil, nil, errors.New("prograd: empty batch")
	}
	if len(img) != B*E {
		return 0, nil, nil, fmt.Errorf("prograd: image features have %d values, want %d × %d", len(img), B, E)
	}
	for i, y := range labels {
		if y < 0 || y >= C {
			return 0, nil, nil, fmt.Errorf("prograd: label %d of sample %d outside 0..%d", y, i, C-1)
		}
	}
	if err := l.forward(img, B); err != nil {
		return 0, nil, nil, err
	}
	l.dlXe, l.dlKl = nn.Grow(l.dlXe, B*C), nn.Grow(l.dlKl, B*C)
	l.xe = crossEntropy(l.dlXe, l.logits, labels, B, C)
	l.kl = distill(l.dlKl, l.logits, l.zs, B, C, l.Cfg.T)
	l.gXe = append(l.gXe[:0], l.backward(l.dlXe, B)...)
	l.gKd = append(l.gKd[:0], l.backward(l.dlKl, B)...)
	l.cos, l.projected = project(l.grad.Data, l.gXe, l.gKd, l.Cfg.Lambda)
	terms := map[string]float64{"loss_xe": l.xe, "loss_kl": l.kl, "cos": l.cos, "projected": 0}
	if l.projected {
		terms["projected"] = 1
	}
	return l.xe, terms, l.logits, nil
}

// forward computes the text features T [C, E] (activations kept), the
// student's logits [B, C] and the teacher's zs [B, C] for img [B, E].
func (l *Learner) forward(img []float32, B int) error {
	txt, err := l.enc.Forward(l.ctx.Data, 1, true)
	if err != nil {
		return fmt.Errorf("prograd: %w", err)
	}
	l.txt = append(l.txt[:0], txt...)
	l.logits = append(l.logits[:0], l.head.Forward(img, l.txt, B, l.C, l.E, l.LogitScale)...)
	l.zs = append(l.zs[:0], clip.Logits(img, l.teacher, B, l.C, l.E, l.LogitScale)...)
	return nil
}

// backward maps a gradient with respect to the logits, dl [B, C], to the
// context [n_ctx·D] through the cosine head and the text encoder (the
// returned slice is the encoder's, overwritten by the next call).
func (l *Learner) backward(dl []float32, B int) []float32 {
	l.dImg, l.dTxt = nn.Grow(l.dImg, B*l.E), nn.Grow(l.dTxt, l.C*l.E)
	l.head.Backward(dl, l.dImg, l.dTxt)
	return l.enc.Backward(l.dTxt)
}

// crossEntropy writes dl [B, C] = (softmax(logits) − onehot(y))/B and
// returns mean_b CE(logits_b, y_b).
func crossEntropy(dl, logits []float32, labels []int, B, C int) float64 {
	var loss float64
	for b := 0; b < B; b++ {
		p := logSoftmax(logits[b*C:(b+1)*C], 1)
		loss -= p[labels[b]]
		for c := range C {
			dl[b*C+c] = float32(math.Exp(p[c]) / float64(B))
		}
		dl[b*C+labels[b]] -= float32(1 / float64(B))
	}
	return loss / float64(B)
}

// distill writes dl [B, C] = T/B · (softmax(logits/T) − softmax(zs/T)) and
// returns T² · mean_b Σ_c −softmax(zs/T)_c · log softmax(logits/T)_c (the
// authors' soft-target cross entropy: KL plus the teacher's entropy).
func distill(dl, logits, zs []float32, B, C int, T float64) float64 {
	var loss float64
	for b := 0; b < B; b++ {
		q := logSoftmax(logits[b*C:(b+1)*C], T)
		p := logSoftmax(zs[b*C:(b+1)*C], T)
		for c := range C {
			pc := math.Exp(p[c])
			loss -= pc * q[c]
			dl[b*C+c] = float32(T / float64(B) * (math.Exp(q[c]) - pc))
		}
	}
	return T * T * loss / float64(B)
}

// logSoftmax returns log softmax(row/T) in float64.
func logSoftmax(row []float32, T float64) []float64 {
	mx := math.Inf(-1)
	for _, v := range row {
		mx = math.Max(mx, float64(v)/T)
	}
	var s float64
	for _, v := range row {
		s += math.Exp(float64(v)/T - mx)
	}
	lse := mx + math.Log(s)
	out := make([]float64, len(row))
	for c, v := range row {
		out[c] = float64(v)/T - lse
	}
	return out
}

// project writes the update direction into g: gXe minus λ times its
// component along gKd when the two conflict (gXe·gKd < 0), else gXe. It
// returns their cosine and whether it projected. The sign of the dot
// product decides, not the cosine: a zero gKd (student = teacher) leaves
// gXe unprojected where the authors' normalisation would give 0/0.
func project(g, gXe, gKd []float32, lambda float64) (float64, bool) {
	var dot, nx, nk float64
	for i := range gXe {
		x, k := float64(gXe[i]), float64(gKd[i])
		dot += x * k
		nx += x * x
		nk += k * k
	}
	cos := 0.0
	if nx > 0 && nk > 0 {
		cos = dot / math.Sqrt(nx*nk)
	}
	if !(dot < 0) {
		copy(g, gXe)
		return cos, false
	}
	f := lambda * dot / nk
	for i := range g {
		g[i] = float32(float64(gXe[i]) - f*float64(gKd[i]))
	}
	return cos, true
}

// TextFeatures returns the raw class text features [C, E] for the current
// context (inference; owned by the learner's encoder).
func (l *Learner) TextFeatures() ([]float32, error) { return l.enc.Forward(l.ctx.Data, 1, false) }

// Intermediates returns what the last Step computed beyond its loss and
// direction: the text features, the zero-shot logits and text features
// (normalised), both losses and both gradients, their cosine and the
// branch.
func (l *Learner) Intermediates() tensor.Named {
	B := len(l.zs) / l.C
	zsTxt := append([]float32(nil), l.teacher...)
	clip.Normalize(zsTxt, l.C, l.E)
	proj := 0.0
	if l.projected {
		proj = 1
	}
	return tensor.Named{
		"text_features":       {Shape: []int{l.C, l.E}, Data: append([]float32(nil), l.txt...)},
		"zs_logits":           {Shape: []int{B, l.C}, Data: append([]float32(nil), l.zs...)},
		"zs_text_features":    {Shape: []int{l.C, l.E}, Data: zsTxt},
		"xe_loss":             prompt.Scalar(l.xe),
		"kl_loss":             prompt.Scalar(l.kl),
		"cos":                 prompt.Scalar(l.cos),
		"projected":           prompt.Scalar(proj),
		"grad_xe." + ParamCtx: {Shape: []int{l.Cfg.NCtx, l.D}, Data: append([]float32(nil), l.gXe...)},
		"grad_kl." + ParamCtx: {Shape: []int{l.Cfg.NCtx, l.D}, Data: append([]float32(nil), l.gKd...)},
	}
}
