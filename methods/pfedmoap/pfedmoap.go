// Package pfedmoap is the math of pFedMoAP (Luo et al., "Mixture of
// Experts Made Personalized: Federated Prompt Learning for Vision-Language
// Models", ICLR 2025), as specs/pfedmoap.md and the authors' code state it:
// each client learns a class-shared CoOp prompt and a local attention gate
// that mixes its prompt's text features with those of K−1 prompts
// downloaded from other clients (experts):
//
//	Î = image feature (CLS), T̂_L = text encoder with the local ctx, both L2-normalised
//	X_j = pool(normalise(text encoder with expert ctx j))   (once per download, no gradient)
//	out[c, b] = Gate(query pool(Î_b); keys = values [pool(T̂_L,c), X_1,c … X_K−1,c])
//	logits[b, c] = λ·s·cos(Î_b, T̂_L,c) + s·⟨pool(Î_b), out[c, b]⟩,  s = exp(logit_scale)
//	loss = CE(logits, y)
//
// pool(x) = x[..., ::r], r = E / gating_embed_dim; the gate is one
// multi-head attention layer (Gate). The server selects a returning
// client's experts by L2 distance between flattened prompts (Nearest; Random
// is the authors' default rule) and averages the prompts (FedAvg, n_k/Σ n);
// the gate never leaves the client.
//
// Defaults (DefaultConfig) are the authors': n_ctx 16, gate 128 wide with 8
// heads, score scale 10, λ 0.5, num_experts 10 (counting the local prompt,
// capped at the number of clients), prompt SGD lr 0.002 with a cosine
// schedule, gate SGD lr 0.01, momentum 0.9 and weight decay 5e-4 for both,
// init N(0, 0.02²).
package pfedmoap

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// ParamCtx is the reference name of the local prompt [n_ctx, D].
const ParamCtx = "prompt_learner.ctx"

// Config holds pFedMoAP's settings.
type Config struct {
	NCtx       int     // n_ctx: context tokens (16)
	GateWidth  int     // gating_embed_dim: d_g (128)
	GateHeads  int     // gating_heads (8)
	Scaling    float64 // scaling: attention score scale (10)
	Lambda     float64 // lambda: weight of the local prompt's logits (0.5)
	NumExperts int     // num_experts: prompts the gate mixes, the local one included (10)
	InitStd    float64 // init_std: the prompt is drawn N(0, InitStd²) (0.02)
	Seed       uint64  // seed of the prompt and gate draws
	// Position is CoOp's class_token_position of the local and the expert
	// prompts: "end" (default, also ""), "middle" or "front" (see
	// prompt.NewEncoderAt).
	Position string

	// Optimizers (the caller runs them): prompt SGD with a cosine schedule,
	// gate SGD with a constant rate.
	LR, Momentum, WeightDecay             float64 // lr, momentum, weight_decay (0.002, 0.9, 5e-4)
	GateLR, GateMomentum, GateWeightDecay float64 // gating_lr, gating_momentum, gating_weight_decay (0.01, 0.9, 5e-4)
	CosinePrompt                          bool    // the prompt's lr follows a cosine schedule (true)
}

// DefaultConfig returns the authors' settings.
func DefaultConfig() Config {
	return Config{
		NCtx: 16, GateWidth: 128, GateHeads: 8, Scaling: 10, Lambda: 0.5, NumExperts: 10, InitStd: 0.02, Position: prompt.PositionEnd,
		LR: 0.002, Momentum: 0.9, WeightDecay: 5e-4,
		GateLR: 0.01, GateMomentum: 0.9, GateWeightDecay: 5e-4, CosinePrompt: true,
	}
}

// Validate names the first bad setting.
func (c Config) Validate() error {
	switch {
	case c.NCtx < 1:
		return fmt.Errorf("pfedmoap: n_ctx %d: must be at least 1", c.NCtx)
	case c.GateWidth < 1:
		return fmt.Errorf("pfedmoap: gate width %d (pfedmoap.gate_width; fixture metadata gating_embed_dim): must be at least 1", c.GateWidth)
	case c.GateHeads < 1 || c.GateWidth%c.GateHeads != 0:
		return fmt.Errorf("pfedmoap: gate heads %d (pfedmoap.gate_heads; fixture metadata gating_heads): must divide the gate width %d", c.GateHeads, c.GateWidth)
	case !(c.Scaling > 0) || math.IsInf(c.Scaling, 0):
		return fmt.Errorf("pfedmoap: scaling %g: must be positive", c.Scaling)
	case !(c.Lambda >= 0) || math.IsInf(c.Lambda, 0):
		return fmt.Errorf("pfedmoap: lambda %g: must not be negative", c.Lambda)
	case c.NumExperts < 1:
		return fmt.Errorf("pfedmoap: num_experts %d: must be at least 1 (it counts the local prompt)", c.NumExperts)
	case !(c.InitStd >= 0) || math.IsInf(c.InitStd, 0):
		return fmt.Errorf("pfedmoap: init_std %g: must not be negative", c.InitStd)
	case !(c.LR > 0) || math.IsInf(c.LR, 0):
		return fmt.Errorf("pfedmoap: lr %g: must be positive", c.LR)
	case !(c.GateLR > 0) || math.IsInf(c.GateLR, 0):
		return fmt.Errorf("pfedmoap: gating_lr %g: must be positive", c.GateLR)
	case !(c.Momentum >= 0) || !(c.GateMomentum >= 0) || math.IsInf(c.Momentum, 0) || math.IsInf(c.GateMomentum, 0):
		return fmt.Errorf("pfedmoap: momentum %g / gating_momentum %g: must not be negative", c.Momentum, c.GateMomentum)
	case !(c.WeightDecay >= 0) || !(c.GateWeightDecay >= 0) || math.IsInf(c.WeightDecay, 0) || math.IsInf(c.GateWeightDecay, 0):
		return fmt.Errorf("pfedmoap: weight_decay %g / gating_weight_decay %g: must not be negative", c.WeightDecay, c.GateWeightDecay)
	}
	if c.Position != "" {
		if err := prompt.CheckPosition(c.Position); err != nil {
			return fmt.Errorf("pfedmoap: %w", err)
		}
	}
	return nil
}

// ValidateClients checks num_experts against a federation of n clients: K
// larger than the number of clients can never be filled. (The authors' code
// silently caps it; Experts does the same for callers that prefer that.)
func (c Config) ValidateClients(n int) error {
	if c.NumExperts > n {
		return fmt.Errorf("pfedmoap: num_experts %d: larger than the %d clients (the pool)", c.NumExperts, n)
	}
	return nil
}

// Experts is the number of non-local prompts a returning client downloads
// in a federation of n clients: min(num_experts, n) − 1, as the code caps it.
func (c Config) Experts(n int) int { return max(min(c.NumExperts, n)-1, 0) }

// IsGate reports whether a parameter belongs to the gate (the second
// optimizer; never uploaded).
func IsGate(name string) bool { return strings.HasPrefix(name, "gating.") }

// Shared reports whether the server receives a parameter: the prompt (for
// the global average and the pool); the gate stays on the client.
func Shared(name string) bool { return name == ParamCtx }

// Learner trains one client's prompt and gate on a frozen CLIP. It is not
// safe for concurrent use.
type Learner struct {
	Cfg        Config
	LogitScale float32 // log of the logit multiplier (the model's by default)

	enc       *prompt.Encoder
	C, E, D   int
	ctx, grad *tensor.Tensor // [n_ctx, D]
	gate      *Gate
	head      Head
	experts   []float32 // pooled normalised expert features [K, C, d_g]
	nExperts  int
	txt       []float32 // local text features of the last Step [C, E]
	dl        []float32
}

// New builds a learner for the class prompts tokens [C, Ctx] (each row the
// tokenised "X X … X {class}." with cfg.NCtx "X"s after the SOT). The prompt
// is drawn N(0, InitStd²) and the gate as PyTorch's Linear default, from
// Seed. It starts with no experts (plain prompt learning).
func New(m *clip.Model, tokens []int, cfg Config) (*Learner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	E := m.W.Config.EmbedDim
	if E%cfg.GateWidth != 0 {
		return nil, fmt.Errorf("pfedmoap: gate_width (gating_embed_dim) %d: must divide the model's feature dim %d", cfg.GateWidth, E)
	}
	pos := cfg.Position
	if pos == "" {
		pos = prompt.PositionEnd
	}
	enc, err := prompt.NewEncoderAt(m, tokens, cfg.NCtx, pos)
	if err != nil {
		return nil, fmt.Errorf("pfedmoap: %w", err)
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x90e))
	gate, err := NewGate(cfg.GateWidth, cfg.GateHeads, float32(cfg.Scaling), rng)
	if err != nil {
		return nil, err
	}
	l := &Learner{Cfg: cfg, LogitScale: m.W.LogitScale, enc: enc, C: enc.R, E: enc.E, D: enc.D, gate: gate}
	l.head = Head{Gate: gate, Lambda: float32(cfg.Lambda)}
	l.ctx, l.grad = tensor.New(cfg.NCtx, enc.D), tensor.New(cfg.NCtx, enc.D)
	for i := range l.ctx.Data {
		l.ctx.Data[i] = float32(rng.NormFloat64() * cfg.InitStd)
	}
	return l, nil
}

// Params returns the live parameters: the prompt and the gate's eight
// tensors, by reference name.
func (l *Learner) Params() tensor.Named {
	p := tensor.Named{ParamCtx: l.ctx}
	for k, v := range l.gate.P {
		p[k] = v
	}
	return p
}

// Grads returns the gradients of the last Step, by parameter name.
func (l *Learner) Grads() tensor.Named {
	g := tensor.Named{ParamCtx: l.grad}
	for k, v := range l.gate.G {
		g[k] = v
	}
	return g
}

// Shared is the package's Shared, for callers holding a learner.
func (l *Learner) Shared(name string) bool { return Shared(name) }

// SetExperts downloads the non-local prompts (each [n_ctx, D]; none: plain
// prompt learning without the gate) and computes their pooled, normalised
// text features once (no gradient).
func (l *Learner) SetExperts(ctxs [][]float32) error {
	dg := l.Cfg.GateWidth
	r := l.E / dg
	l.experts = l.experts[:0]
	one := make([]float32, l.C*dg)
	for j, c := range ctxs {
		if len(c) != l.Cfg.NCtx*l.D {
			return fmt.Errorf("pfedmoap: expert %d has %d values, want [%d, %d]", j, len(c), l.Cfg.NCtx, l.D)
		}
		f, err := l.enc.Forward(c, 1, false)
		if err != nil {
			return fmt.Errorf("pfedmoap: expert %d: %w", j, err)
		}
		t := append([]float32(nil), f...)
		clip.NormalizeRows(nil, t, l.C, l.E)
		PoolForward(one, t, l.C, dg, r)
		l.experts = append(l.experts, one...)
	}
	l.nExperts = len(ctxs)
	return nil
}

// ExpertFeatures returns the experts' pooled, normalised text features
// [K, C, d_g] (owned by the learner).
func (l *Learner) ExpertFeatures() []float32 { return l.experts }

// Step computes the loss of image features imgFeat [B, E] (B = len(labels))
// and overwrites Grads() (prompt and gate). It returns the loss and the
// logits [B, C] (owned by the learner, valid until the next Step).
func (l *Learner) Step(imgFeat []float32, labels []int) (float64, []float32, error) {
	B := len(labels)
	if B == 0 {
		return 0, nil, errors.New("pfedmoap: empty batch")
	}
	for i, y := range labels {
		if y < 0 || y >= l.C {
			return 0, nil, fmt.Errorf("pfedmoap: label %d of sample %d outside 0..%d", y, i, l.C-1)
		}
	}
	if len(imgFeat) != B*l.E {
		return 0, nil, fmt.Errorf("pfedmoap: image features have %d values, want [%d, %d]", len(imgFeat), B, l.E)
	}
	txt, err := l.enc.Forward(l.ctx.Data, 1, true)
	if err != nil {
		return 0, nil, fmt.Errorf("pfedmoap: %w", err)
	}
	l.txt = txt
	logits, err := l.head.Forward(imgFeat, txt, B, l.C, l.E, l.experts, l.LogitScale)
	if err != nil {
		return 0, nil, err
	}
	l.dl = growF(l.dl, B*l.C)
	loss := clip.CrossEntropy(logits, labels, B, l.C, l.dl)
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return 0, nil, fmt.Errorf("pfedmoap: loss is %v", loss)
	}
	l.gate.ZeroGrad()
	copy(l.grad.Data, l.enc.Backward(l.head.Backward(l.dl)))
	return loss, logits, nil
}

// Logits scores image features imgFeat [B, E] with the current prompt, gate
// and experts (inference): [B, C], owned by the learner.
func (l *Learner) Logits(imgFeat []float32, B int) ([]float32, error) {
	txt, err := l.enc.Forward(l.ctx.Data, 1, false)
	if err != nil {
		return nil, fmt.Errorf("pfedmoap: %w", err)
	}
	l.txt = txt
	return l.head.Forward(imgFeat, txt, B, l.C, l.E, l.experts, l.LogitScale)
}

// GateOutput returns the gate's output of the last Step [C, B, d_g] and its
// head-averaged attention [C, B, K+1] (nil without experts; owned by the
// learner).
func (l *Learner) GateOutput() (out, attention []float32) {
	if l.nExperts == 0 {
		return nil, nil
	}
	return l.gate.out, l.gate.Attention()
}

func growF(buf []float32, n int) []float32 {
	if cap(buf) >= n {
		return buf[:n]
	}
	return make([]float32, n)
}
