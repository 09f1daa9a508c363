// Package cocoop is CoCoOp (Zhou et al., "Conditional Prompt Learning for
// Vision-Language Models", CVPR 2022) run federated as FLiP and PMFLT do: the
// prompt learner — a CoOp context and a small meta-network — is trained by
// every client on a frozen CLIP and averaged by the server (FedAvg, weights
// n_k / Σ n, every tensor shared).
//
// Per step, for raw image features I [B, E] (the frozen image encoder's
// output, cached) and the class prompts "X X … X {class}." (n_ctx "X"s):
//
//	Î      = I / ‖I‖                                                 [B, E]
//	π      = W₂ ReLU(W₁ Î + b₁) + b₂     (the meta-net; hidden E/16) [B, D]
//	ctx_b  = ctx + π_b                   (the same bias at every slot) [B, n_ctx, D]
//	T_b    = text encoder with ctx_b at positions 1..n_ctx           [B, C, E]
//	logits = exp(logit_scale) · cos(Î_b, T_b,c)                      [B, C]
//	loss   = CE(logits, y)
//
// so every image has its own text features: a batch runs B·C prompt rows
// (the shared-prefix path of prompt.Encoder computes each image's SOT and
// context once). Defaults follow the authors' trainers/cocoop.py and
// configs (vit_b16_c4_ep10_batch1_ctxv1): n_ctx 4, the context initialised
// from the words "a photo of a" (ctx_init; empty: N(0, 0.02²)), the
// meta-net as PyTorch's nn.Linear initialises it; the optimizer (SGD lr
// 0.002, momentum 0.9, weight decay 5e-4, batch 1) is the caller's.
package cocoop

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

// Reference names of the prompt learner's tensors.
const (
	ParamCtx = "prompt_learner.ctx"
	ParamW1  = "prompt_learner.meta_net.linear1.weight"
	ParamB1  = "prompt_learner.meta_net.linear1.bias"
	ParamW2  = "prompt_learner.meta_net.linear2.weight"
	ParamB2  = "prompt_learner.meta_net.linear2.bias"
)

// ParamNames lists the prompt learner's tensors, all trained and shared.
var ParamNames = []string{ParamCtx, ParamW1, ParamB1, ParamW2, ParamB2}

// Config holds CoCoOp's settings.
type Config struct {
	NCtx    int     // n_ctx: learned context tokens (4)
	InitStd float64 // init_std: the context is drawn N(0, InitStd²) when no init words are given (0.02)
	Seed    uint64  // seed of the random init
	// InitCtx, when set, holds the initial context [NCtx, D] (the token
	// embeddings of ctx_init's words); otherwise it is drawn.
	InitCtx []float32
}

// Validate names the first bad setting.
func (c Config) Validate() error {
	switch {
	case c.NCtx < 1:
		return fmt.Errorf("cocoop: n_ctx %d: must be at least 1", c.NCtx)
	case c.InitStd < 0:
		return fmt.Errorf("cocoop: init_std %g: must not be negative", c.InitStd)
	}
	return nil
}

// Learner trains one CoCoOp prompt learner on a frozen CLIP for one class
// list. It is not safe for concurrent use.
type Learner struct {
	Cfg        Config
	LogitScale float32 // log of the logit multiplier

	m          *clip.Model
	tokens     []int
	C, E, D, H int // classes, feature dim, text width, meta-net hidden width
	p, g       tensor.Named
	encs       map[int]*prompt.Encoder // by batch size: B·C rows, B groups

	ce                   prompt.CosineCE
	imn, hid, bias, ctxS []float32
	dTxt, logits, dH     []float32
	txtB                 []float32 // text features of the last Step [B, C, E]
}

// New builds a learner for the class prompts tokens [C, Ctx] (each row the
// tokenised "X X … X {class}." with cfg.NCtx placeholder words after the
// SOT). The meta-net is initialised as nn.Linear does (uniform ±1/√fan_in
// for weights and biases) from Seed.
func New(m *clip.Model, tokens []int, cfg Config) (*Learner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// one encoder to check the prompts
	enc, err := prompt.NewEncoder(m, tokens, cfg.NCtx)
	if err != nil {
		return nil, fmt.Errorf("cocoop: %w", err)
	}
	E, D := enc.E, enc.D
	H := E / 16
	if H < 1 {
		return nil, fmt.Errorf("cocoop: embedding dim %d: the meta-net's hidden width E/16 is 0", E)
	}
	l := &Learner{Cfg: cfg, LogitScale: m.W.LogitScale, m: m, tokens: tokens, C: enc.R, E: E, D: D, H: H,
		encs: map[int]*prompt.Encoder{1: enc}}
	l.p = tensor.Named{ParamCtx: tensor.New(cfg.NCtx, D), ParamW1: tensor.New(H, E), ParamB1: tensor.New(H),
		ParamW2: tensor.New(D, H), ParamB2: tensor.New(D)}
	l.g = tensor.Named{}
	for k, t := range l.p {
		l.g[k] = tensor.New(t.Shape...)
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0xc0c0))
	ctx := l.p[ParamCtx].Data
	if cfg.InitCtx != nil {
		if len(cfg.InitCtx) != len(ctx) {
			return nil, fmt.Errorf("cocoop: ctx_init gives %d values, want %d × %d", len(cfg.InitCtx), cfg.NCtx, D)
		}
		copy(ctx, cfg.InitCtx)
	} else {
		for i := range ctx {
			ctx[i] = float32(rng.NormFloat64() * cfg.InitStd)
		}
	}
	for _, lin := range [][3]any{{ParamW1, ParamB1, E}, {ParamW2, ParamB2, H}} {
		bound := 1 / math.Sqrt(float64(lin[2].(int)))
		for _, name := range []string{lin[0].(string), lin[1].(string)} {
			for i := range l.p[name].Data {
				l.p[name].Data[i] = float32((2*rng.Float64() - 1) * bound)
			}
		}
	}
	return l, nil
}

// Params returns the live parameters by reference name.
func (l *Learner) Params() tensor.Named { return l.p }

// Grads returns the gradients of the last Step, by parameter name.
func (l *Learner) Grads() tensor.Named { return l.g }

// Shared reports whether the server averages a parameter: all of them are.
func (l *Learner) Shared(name string) bool { _, ok := l.p[name]; return ok }

func (l *Learner) encoder(B int) (*prompt.Encoder, error) {
	if e, ok := l.encs[B]; ok {
		return e, nil
	}
	rows := make([]int, 0, B*len(l.tokens))
	for range B {
		rows = append(rows, l.tokens...)
	}
	e, err := prompt.NewEncoder(l.m, rows, l.Cfg.NCtx)
	if err != nil {
		return nil, fmt.Errorf("cocoop: %w", err)
	}
	l.encs[B] = e
	return e, nil
}

// metaForward computes Î [B, E], the hidden ReLU(W₁Î + b₁) [B, H], the bias
// π [B, D] and the shifted contexts ctx + π_b [B, n_ctx, D].
func (l *Learner) metaForward(img []float32, B int) {
	E, H, D, n := l.E, l.H, l.D, l.Cfg.NCtx
	l.imn = nn.Grow(l.imn, B*E)
	for b := 0; b < B; b++ {
		row := img[b*E : (b+1)*E]
		var ss float64
		for _, v := range row {
			ss += float64(v) * float64(v)
		}
		inv := float32(1 / math.Sqrt(ss))
		for k, v := range row {
			l.imn[b*E+k] = v * inv
		}
	}
	l.hid = nn.Grow(l.hid, B*H)
	nn.LinearForward(l.hid, l.imn, l.p[ParamW1].Data, l.p[ParamB1].Data, B, E, H)
	for i, v := range l.hid {
		l.hid[i] = max(v, 0)
	}
	l.bias = nn.Grow(l.bias, B*D)
	nn.LinearForward(l.bias, l.hid, l.p[ParamW2].Data, l.p[ParamB2].Data, B, H, D)
	l.ctxS = nn.Grow(l.ctxS, B*n*D)
	ctx := l.p[ParamCtx].Data
	for b := 0; b < B; b++ {
		for j := 0; j < n; j++ {
			dst := l.ctxS[(b*n+j)*D : (b*n+j+1)*D]
			for k := range dst {
				dst[k] = ctx[j*D+k] + l.bias[b*D+k]
			}
		}
	}
}

// metaBackward takes the gradient at the shifted contexts dctxS
// [B, n_ctx, D] and writes every parameter's gradient.
func (l *Learner) metaBackward(dctxS []float32, B int) {
	E, H, D, n := l.E, l.H, l.D, l.Cfg.NCtx
	for _, g := range l.g {
		clear(g.Data)
	}
	dctx := l.g[ParamCtx].Data
	dbias := make([]float32, B*D)
	for b := 0; b < B; b++ {
		for j := 0; j < n; j++ {
			src := dctxS[(b*n+j)*D : (b*n+j+1)*D]
			for k, v := range src {
				dctx[j*D+k] += v
				dbias[b*D+k] += v
			}
		}
	}
	l.dH = nn.Grow(l.dH, B*H)
	clear(l.dH)
	nn.LinearBackward(l.dH, l.g[ParamW2].Data, l.g[ParamB2].Data, dbias, l.hid, l.p[ParamW2].Data, B, H, D)
	for i, h := range l.hid {
		if h <= 0 {
			l.dH[i] = 0
		}
	}
	nn.LinearBackward(nil, l.g[ParamW1].Data, l.g[ParamB1].Data, l.dH, l.imn, l.p[ParamW1].Data, B, E, H)
}

// forward runs the prompts of B images; it returns the raw text features
// [B·C, E] (owned by the encoder).
func (l *Learner) forward(img []float32, B int, train bool) ([]float32, *prompt.Encoder, error) {
	if len(img) != B*l.E {
		return nil, nil, fmt.Errorf("cocoop: image features have %d values, want %d × %d", len(img), B, l.E)
	}
	enc, err := l.encoder(B)
	if err != nil {
		return nil, nil, err
	}
	l.metaForward(img, B)
	txt, err := enc.Forward(l.ctxS, B, train)
	if err != nil {
		return nil, nil, fmt.Errorf("cocoop: %w", err)
	}
	return txt, enc, nil
}

// Step computes the loss of raw image features imgFeat [B, E] (B =
// len(labels)) and overwrites Grads(). It returns the loss, its terms
// ("loss_ce") and the logits [B, C] (owned by the learner).
func (l *Learner) Step(imgFeat []float32, labels []int) (float64, map[string]float64, []float32, error) {
	B, C, E := len(labels), l.C, l.E
	if B == 0 {
		return 0, nil, nil, errors.New("cocoop: empty batch")
	}
	txt, enc, err := l.forward(imgFeat, B, true)
	if err != nil {
		return 0, nil, nil, err
	}
	l.txtB = append(l.txtB[:0], txt...)
	l.logits, l.dTxt = nn.Grow(l.logits, B*C), nn.Grow(l.dTxt, B*C*E)
	var loss float64
	for b := 0; b < B; b++ {
		// image b against its own C text features; CE of one row, / B
		lb, lg, dT, err := l.ce.Loss(l.imn[b*E:(b+1)*E], txt[b*C*E:(b+1)*C*E], 1, C, E, l.LogitScale, labels[b:b+1])
		if err != nil {
			return 0, nil, nil, fmt.Errorf("cocoop: image %d: %w", b, err)
		}
		loss += lb / float64(B)
		copy(l.logits[b*C:(b+1)*C], lg)
		for i, v := range dT {
			l.dTxt[b*C*E+i] = v / float32(B)
		}
	}
	l.metaBackward(enc.Backward(l.dTxt), B)
	return loss, map[string]float64{"loss_ce": loss}, l.logits, nil
}

// Logits scores raw image features img [B, E] against the classes, each
// image with its own prompts (inference; owned by the learner). Images run
// in chunks of at most evalRows/C so that an evaluation batch does not hold
// B·C prompt rows' activations at once.
func (l *Learner) Logits(img []float32, B int) ([]float32, error) {
	C, E := l.C, l.E
	if len(img) != B*E {
		return nil, fmt.Errorf("cocoop: image features have %d values, want %d × %d", len(img), B, E)
	}
	out := make([]float32, B*C)
	chunk := max(1, evalRows/C)
	for lo := 0; lo < B; lo += chunk {
		n := min(chunk, B-lo)
		txt, _, err := l.forward(img[lo*E:(lo+n)*E], n, false)
		if err != nil {
			return nil, err
		}
		for b := 0; b < n; b++ {
			copy(out[(lo+b)*C:(lo+b+1)*C], clip.Logits(l.imn[b*E:(b+1)*E], txt[b*C*E:(b+1)*C*E], 1, C, E, l.LogitScale))
		}
	}
	l.logits = out
	return out, nil
}

// evalRows bounds the prompt rows of one inference chunk (a variable for
// the tests).
var evalRows = 512

// Intermediates returns the meta-net bias [B, D], the shifted contexts
// [B, n_ctx, D] and the raw text features [B, C, E] of the last Step.
func (l *Learner) Intermediates(B int) tensor.Named {
	return tensor.Named{
		"meta_bias":     {Shape: []int{B, l.D}, Data: append([]float32(nil), l.bias[:B*l.D]...)},
		"ctx_shifted":   {Shape: []int{B, l.Cfg.NCtx, l.D}, Data: append([]float32(nil), l.ctxS[:B*l.Cfg.NCtx*l.D]...)},
		"text_features": {Shape: []int{B, l.C, l.E}, Data: append([]float32(nil), l.txtB...)},
	}
}
