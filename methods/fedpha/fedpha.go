// Package fedpha is the math of FedPHA (Fang et al., "Federated Prompt
// Learning for Heterogeneous Client Adaptation", ICML 2025) as the PMFLT
// toolbox computes it (model/FedPHA.py, federated/client_fedpha.py; the
// official repository ships no trainer source): every client learns a
// global CoOp context G (averaged by the server, weights n_i / Σ n over the
// round's clients) and a private local context L (never uploaded) on a
// frozen CLIP. The local context is also projected by the SVD of the global
// one:
//
//	G = U S Vᵀ (reduced),  P = V[:, c:] V[:, c:]ᵀ,  c = int(k·(1 − ratio))  [D, D]
//	f_L, f_G, f_P = text encoder with L, G, L·P for every class, normalised  [C, E]
//	logits        = e^s·cos(I, f_L);  logits_global = e^s·cos(I, f_G)        [B, C]
//	loss = CE(logits, y) + CE(logits_global, y)
//	     + λ_pull·mean((f_L − f_P)²) + λ_push·mean_c ReLU(α − ‖f_L,c − f_G,c‖)
//
// The gradient flows through the SVD into G (Projection.Backward). P is
// the projector onto the smallest right singular directions *inside* G's row
// space, as the code has it, not onto its orthogonal complement (the
// paper's "null space"); with ratio 0.8 and n_ctx ≤ 4, c is 0 and P is the
// whole row-space projector. The personal model scores with f_L, the global
// model (the server's general evaluation) with f_G.
//
// The paper's local prompts may differ in length from client to client;
// PMFLT's port (the reference here) gives both prompts the same n_ctx, and
// so does this package.
//
// Defaults: PMFLT's fedpha.yaml (n_ctx 16, one prompt, ratio 0.8, α 1,
// λ_pull = λ_push = 1 as hard-coded, init N(0, 0.02²)). See specs/fedpha.md.
package fedpha

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

// Reference names of the two contexts, each [1, n_ctx, D].
const (
	ParamGlobal = "prompt_learner.ctx_global"
	ParamLocal  = "prompt_learner.ctx_local"
)

// Config holds FedPHA's settings.
type Config struct {
	NCtx       int     // n_ctx: context tokens per prompt (16)
	Ratio      float64 // ratio: fraction of the singular directions kept in P (0.8)
	Alpha      float64 // alpha: the push term's margin α (1)
	LambdaPull float64 // lambda_pull: weight of the pull term (1)
	LambdaPush float64 // lambda_push: weight of the push term (1)
	InitStd    float64 // init_std: contexts drawn N(0, InitStd²) (0.02)
	Seed       uint64  // seed of that draw
}

// DefaultConfig returns PMFLT's settings (config/models/fedpha.yaml).
func DefaultConfig() Config {
	return Config{NCtx: 16, Ratio: 0.8, Alpha: 1, LambdaPull: 1, LambdaPush: 1, InitStd: 0.02}
}

// Validate names the first bad setting.
func (c Config) Validate() error {
	switch {
	case c.NCtx < 1:
		return fmt.Errorf("fedpha: n_ctx %d: must be at least 1", c.NCtx)
	case !(c.Ratio >= 0 && c.Ratio <= 1):
		return fmt.Errorf("fedpha: ratio %g: must lie in [0, 1]", c.Ratio)
	case !(c.Alpha >= 0) || math.IsInf(c.Alpha, 0):
		return fmt.Errorf("fedpha: alpha %g: must be a non-negative number", c.Alpha)
	case !(c.LambdaPull >= 0) || math.IsInf(c.LambdaPull, 0):
		return fmt.Errorf("fedpha: lambda_pull %g: must be a non-negative number", c.LambdaPull)
	case !(c.LambdaPush >= 0) || math.IsInf(c.LambdaPush, 0):
		return fmt.Errorf("fedpha: lambda_push %g: must be a non-negative number", c.LambdaPush)
	case !(c.InitStd > 0) || math.IsInf(c.InitStd, 0):
		return fmt.Errorf("fedpha: init_std %g: must be positive (a zero global prompt has no SVD derivative)", c.InitStd)
	}
	return nil
}

// Learner trains one client's FedPHA prompts on a frozen CLIP. Several
// clients may share one Learner when they train one at a time (load a
// client's contexts into Params() first). It is not safe for concurrent use.
type Learner struct {
	Cfg        Config
	LogitScale float32 // log of the logit multiplier (the model's by default)

	enc     *prompt.Encoder // 3·C rows: local, global, projected prompts
	one     *prompt.Encoder // C rows: scoring with one prompt
	C, E, D int
	global  *tensor.Tensor // [1, n_ctx, D]
	local   *tensor.Tensor // [1, n_ctx, D]
	dGlobal *tensor.Tensor
	dLocal  *tensor.Tensor

	proj      Projection
	projected []float32 // L·P [n_ctx, D]
	ctx3      []float32 // [3, n_ctx, D]: L, G, L·P
	txt       []float32 // raw text features of the last Step [3C, E]
	ceL, ceG  prompt.CosineCE
	logitsG   []float32 // [B, C] of the last Step
	nhat      []float32 // [3C, E] normalised text features
	norms     []float32 // [3C]
	dist      []float32 // [C] ‖f̂_L − f̂_G‖
	dn, dfeat []float32 // [3C, E]
	dP        []float32 // [D, D]
	scoreTxt  []float32 // [C, E] text features of the last Prepare
}

// New builds a learner for the class prompts tokens [C, Ctx] (each row the
// tokenised "X X … X {class}." with cfg.NCtx "X"s after the SOT). The
// contexts are drawn N(0, InitStd²) from Seed, the global one first.
func New(m *clip.Model, tokens []int, cfg Config) (*Learner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rows := make([]int, 0, 3*len(tokens))
	for range 3 {
		rows = append(rows, tokens...)
	}
	enc, err := prompt.NewEncoder(m, rows, cfg.NCtx)
	if err != nil {
		return nil, fmt.Errorf("fedpha: %w", err)
	}
	one, err := prompt.NewEncoder(m, tokens, cfg.NCtx)
	if err != nil {
		return nil, fmt.Errorf("fedpha: %w", err)
	}
	l := &Learner{Cfg: cfg, LogitScale: m.W.LogitScale, enc: enc, one: one, C: one.R, E: enc.E, D: enc.D}
	l.proj.Ratio = cfg.Ratio
	shape := []int{1, cfg.NCtx, enc.D}
	l.global, l.local = tensor.New(shape...), tensor.New(shape...)
	l.dGlobal, l.dLocal = tensor.New(shape...), tensor.New(shape...)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0xf3d9a))
	for _, t := range []*tensor.Tensor{l.global, l.local} {
		for i := range t.Data {
			t.Data[i] = float32(rng.NormFloat64() * cfg.InitStd)
		}
	}
	return l, nil
}

// Params returns the live parameters by reference name.
func (l *Learner) Params() tensor.Named {
	return tensor.Named{ParamGlobal: l.global, ParamLocal: l.local}
}

// Grads returns the gradients of the last Step, by parameter name.
func (l *Learner) Grads() tensor.Named {
	return tensor.Named{ParamGlobal: l.dGlobal, ParamLocal: l.dLocal}
}

// Shared reports whether the server averages a parameter: the global
// context only.
func Shared(name string) bool { return name == ParamGlobal }

// Shared is the package's Shared, for callers holding a learner.
func (l *Learner) Shared(name string) bool { return Shared(name) }

// Step computes the loss of image features img [B, E] (B = len(labels))
// and overwrites Grads(). It returns the loss, its terms ("loss_ce",
// "loss_ce_global", "loss_pull", "loss_push") and the personal logits
// [B, C] (owned by the learner, valid until the next Step).
func (l *Learner) Step(img []float32, labels []int) (float64, map[string]float64, []float32, error) {
	B, C, E, D, n := len(labels), l.C, l.E, l.D, l.Cfg.NCtx
	if B == 0 {
		return 0, nil, nil, errors.New("fedpha: empty batch")
	}
	// P from the global context; the projected local context L·P
	P, err := l.proj.Forward(l.global.Data, n, D)
	if err != nil {
		return 0, nil, nil, err
	}
	l.projected = nn.Grow(l.projected, n*D)
	nn.MatMulForward(l.projected, l.local.Data, P, n, D, D)
	l.ctx3 = nn.Grow(l.ctx3, 3*n*D)
	copy(l.ctx3, l.local.Data)
	copy(l.ctx3[n*D:], l.global.Data)
	copy(l.ctx3[2*n*D:], l.projected)
	txt, err := l.enc.Forward(l.ctx3, 3, true)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("fedpha: %w", err)
	}
	l.txt = txt
	fL, fG := txt[:C*E], txt[C*E:2*C*E]

	// the two cross entropies (gradients with respect to the raw features)
	lossCE, logits, dL, err := l.ceL.Loss(img, fL, B, C, E, l.LogitScale, labels)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("fedpha: %w", err)
	}
	lossG, logitsG, dG, err := l.ceG.Loss(img, fG, B, C, E, l.LogitScale, labels)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("fedpha: %w", err)
	}
	l.logitsG = logitsG

	// pull and push on the normalised features
	pull, push := l.regularisers()
	loss := lossCE + lossG + pull + push
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return 0, nil, nil, fmt.Errorf("fedpha: loss is %v", loss)
	}
	l.dfeat = nn.Grow(l.dfeat, 3*C*E)
	clip.NormBackward(l.dfeat, l.dn, l.nhat, l.norms, 3*C, E)
	for i := range dL {
		l.dfeat[i] += dL[i]
		l.dfeat[C*E+i] += dG[i]
	}

	// back through the encoder: d[L; G; L·P]
	dctx := l.enc.Backward(l.dfeat)
	dLoc, dGlob, dProj := dctx[:n*D], dctx[n*D:2*n*D], dctx[2*n*D:3*n*D]
	// L·P: dL += dY·Pᵀ (P is symmetric), dP = Lᵀ·dY [D, D]
	copy(l.dLocal.Data, dLoc)
	nn.MatMulBackward(l.dLocal.Data, nil, dProj, l.local.Data, P, n, D, D)
	copy(l.dGlobal.Data, dGlob)
	l.dP = nn.Grow(l.dP, D*D)
	clear(l.dP)
	nn.MatMulBackward(nil, l.dP, dProj, l.local.Data, P, n, D, D)
	if err := l.proj.Backward(l.dGlobal.Data, l.dP); err != nil {
		return 0, nil, nil, err
	}
	terms := map[string]float64{"loss_ce": lossCE, "loss_ce_global": lossG, "loss_pull": pull, "loss_push": push}
	return loss, terms, logits, nil
}

// regularisers computes the pull and push terms on the normalised text
// features of the last forward and writes their gradient with respect to
// the normalised features into l.dn [3C, E]:
//
//	pull = λ_pull·mean_{c,e}(f̂_L − f̂_P)²
//	push = λ_push·mean_c ReLU(α − ‖f̂_L,c − f̂_G,c‖)
func (l *Learner) regularisers() (pull, push float64) {
	C, E := l.C, l.E
	l.nhat = append(l.nhat[:0], l.txt[:3*C*E]...)
	l.norms = clip.Normalize(l.nhat, 3*C, E)
	l.dn = nn.Grow(l.dn, 3*C*E)
	clear(l.dn)
	nL, nG, nP := l.nhat[:C*E], l.nhat[C*E:2*C*E], l.nhat[2*C*E:]
	dnL, dnG, dnP := l.dn[:C*E], l.dn[C*E:2*C*E], l.dn[2*C*E:]
	kPull := l.Cfg.LambdaPull / float64(C*E)
	for i := range nL {
		d := float64(nL[i]) - float64(nP[i])
		pull += d * d
		g := float32(2 * kPull * d)
		dnL[i] += g
		dnP[i] -= g
	}
	pull *= kPull
	l.dist = nn.Grow(l.dist, C)
	kPush := l.Cfg.LambdaPush / float64(C)
	for c := 0; c < C; c++ {
		a, b := nL[c*E:(c+1)*E], nG[c*E:(c+1)*E]
		var ss float64
		for k := range a {
			d := float64(a[k]) - float64(b[k])
			ss += d * d
		}
		dist := math.Sqrt(ss)
		l.dist[c] = float32(dist)
		if m := l.Cfg.Alpha - dist; m > 0 {
			push += kPush * m
			if dist > 0 {
				// ∂/∂f̂_L = −λ/C · (f̂_L − f̂_G)/‖·‖
				s := -kPush / dist
				for k := range a {
					g := float32(s * (float64(a[k]) - float64(b[k])))
					dnL[c*E+k] += g
					dnG[c*E+k] -= g
				}
			}
		}
	}
	return pull, push
}

// Prepare computes the personal model's text features (the local prompt)
// for Logits.
func (l *Learner) Prepare() error { return l.prepare(l.local.Data) }

// PrepareGlobal computes the global model's text features (the global
// prompt, as the server's evaluation) for Logits.
func (l *Learner) PrepareGlobal() error { return l.prepare(l.global.Data) }

func (l *Learner) prepare(ctx []float32) error {
	txt, err := l.one.Forward(ctx, 1, false)
	if err != nil {
		return fmt.Errorf("fedpha: %w", err)
	}
	l.scoreTxt = append(l.scoreTxt[:0], txt...)
	return nil
}

// Logits scores image features img [B, E] with the text features of the
// last Prepare: e^s·cos [B, C].
func (l *Learner) Logits(img []float32, B int) ([]float32, error) {
	if B < 1 || len(img) != B*l.E {
		return nil, fmt.Errorf("fedpha: image features have %d values, not [%d, %d]", len(img), B, l.E)
	}
	if len(l.scoreTxt) != l.C*l.E {
		return nil, errors.New("fedpha: Logits before Prepare")
	}
	return clip.Logits(img, l.scoreTxt, B, l.C, l.E, l.LogitScale), nil
}
