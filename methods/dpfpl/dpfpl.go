// Package dpfpl is DP-FPL (Tran, Sun, Patterson and Milanova,
// "Privacy-Preserving Personalized Federated Prompt Learning for Multimodal
// Large Language Models", ICLR 2025; code github.com/linhhtran/DP-FPL) as
// the authors' trainer (trainers/DP_FPL.py, factorization "dpfpl")
// computes it: a CoOp prompt that is the sum of a global context, shared
// through the server with global differential privacy, and a personal
// local context, updated through a low-rank factorisation plus residual
// with local differential privacy.
//
// Parameters (the code's names): global_ctx G [n, D] and local_ctx L
// [n, D], n = n_ctx, drawn N(0, 0.02²) in that order. Per step, for image
// features I [B, E] and the class prompts "X … X {class}.":
//
//	U, V, Res = factorize(L, Ω)       Ω ∼ N(0,1) [D, r]; U [n, r], V [r, D]
//	ctx    = G + U·V + Res            (= G + L)                       [n, D]
//	T      = text encoder with ctx at positions 1..n                  [C, E]
//	logits = exp(logit_scale)·cos(I, T),  loss = CE(logits, y)        [B, C]
//	g      = ∂loss/∂ctx                                               [n, D]
//
// factorize is one power iteration: U = gs(L·Ω), V = gs(Lᵀ·U)ᵀ with gs the
// column-wise Gram–Schmidt of the code's orthogonalize (both factors are
// orthonormalised, so U·V is not a low-rank approximation of L: the
// residual Res = L − U·V carries the rest), held constant in the backward.
// The forward here uses G + L (the code's G + U·V + Res up to rounding) and
// the factorisation runs after the backward, in Privatize, which draws Ω.
//
// The privacy mechanism then replaces the gradients (the code's
// forward_pass, only when noise is on — ε > 0):
//
//	grad G = clip_C(g)                                  (global: no client noise)
//	gU = clip_C(g·Vᵀ) + N(0, s²) [n, r],  gV = clip_C(Uᵀ·g) + N(0, s²) [r, D]
//
// with clip_C(x) = x·min(1, C/‖x‖) over the whole tensor (the batch
// gradient, not per example) and s = σ·C/B, σ = √(T·log(1/δ))/ε
// (PaperSigma with q = 1, T the calibration rounds). Whether or not noise is
// on, the local context's gradient is the code's compute_full_grad of the
// factors:
//
//	a = gU/10, b = gV/10
//	grad L = a·V + U·b + U·(Uᵀ·(a·V))
//
// which is not ∂loss/∂L (see SurrogateGradient). The server averages the
// clipped global gradients and adds N(0, (s/K)²) for K clients (global DP);
// see the package's method.go for how that maps onto rounds. The sites
// upload without noise, so "global DP" protects a site's examples against
// the other sites and whoever sees the published global context, not
// against the coordinator, which sees each upload in the clear.
//
// Accounting (accountant.go, Ledger): every Gaussian release is counted —
// gU and gV at every local step, the server's noise once a round at the
// sensitivity of S local steps' upload (UploadFactor) — at two per-example
// sensitivities: the code's stated C/B (which would hold for per-example
// clipping, not done here) and 2C, what clipping the batch-mean gradient to
// norm C actually bounds one example's effect by.
//
// Config.PerExampleDP (the per_example_dp setting, not the authors') runs
// DP-SGD instead: each example's gradient of the context, its gU and its
// gV clipped to C, summed, divided by B, and N(0, s²) added to all three on
// the site at every step. Every parameter is then a function of noised
// releases, so one example moves each release by at most C/B and the
// upload is private against the coordinator too; the training loss and
// the evaluation accuracies a site reports are not privatised.
package dpfpl

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

// Reference parameter names.
const (
	ParamGlobal = "prompt_learner.global_ctx"
	ParamLocal  = "prompt_learner.local_ctx"
)

// Config holds DP-FPL's model settings.
type Config struct {
	NCtx     int     // n_ctx: learned context tokens (16)
	Rank     int     // rank r of the factorisation (8)
	ClipNorm float64 // norm_thresh C: clipping threshold of the gradients (10)
	// NoiseStd is s, the standard deviation of the local noise on the
	// factors' gradients; 0 turns the privacy mechanism off (no clipping
	// and no noise, as the code with --noise 0).
	NoiseStd float64
	InitStd  float64 // init_std: G and L drawn N(0, InitStd²) (0.02)
	Seed     uint64  // seed of that draw
	// PerExampleDP replaces the code's mechanism (with noise on) by DP-SGD's
	// on all three gradients: each example's gradient (of the global
	// context, and its gU and gV) clipped to ClipNorm, summed, divided by
	// DPBatch, and N(0, NoiseStd²) added to each, the global one on the
	// site. One example then moves each release by at most C/DPBatch.
	PerExampleDP bool
	DPBatch      int // B of the noise's calibration s = σ·C/B (PerExampleDP)
}

// DefaultConfig returns the code's defaults (noise off).
func DefaultConfig() Config {
	return Config{NCtx: 16, Rank: 8, ClipNorm: 10, InitStd: 0.02}
}

// Validate names the first bad setting.
func (c Config) Validate() error {
	switch {
	case c.NCtx < 1:
		return fmt.Errorf("dpfpl: n_ctx %d: must be at least 1", c.NCtx)
	case c.Rank < 1 || c.Rank > c.NCtx:
		return fmt.Errorf("dpfpl: rank %d: must lie in 1..n_ctx (%d)", c.Rank, c.NCtx)
	case !(c.ClipNorm > 0) || math.IsInf(c.ClipNorm, 0):
		return fmt.Errorf("dpfpl: norm_thresh %g: must be positive", c.ClipNorm)
	case !(c.NoiseStd >= 0) || math.IsInf(c.NoiseStd, 0):
		return fmt.Errorf("dpfpl: noise standard deviation %g: must not be negative", c.NoiseStd)
	case !(c.InitStd >= 0) || math.IsInf(c.InitStd, 0):
		return fmt.Errorf("dpfpl: init_std %g: must not be negative", c.InitStd)
	case c.PerExampleDP && c.DPBatch < 1:
		return fmt.Errorf("dpfpl: per_example_dp with batch %d: the noise's batch must be at least 1", c.DPBatch)
	}
	return nil
}

// Source supplies the mechanism's random draws: Gaussian fills dst with
// N(0, std²) values. what names the draw ("omega" [D, r], "noise_u"
// [n, r], "noise_v" [r, D], with PerExampleDP "noise_g" [n, D] first) for a
// source that replays recorded ones.
type Source interface {
	Gaussian(dst []float32, std float64, what string) error
}

// RNGSource draws from a random generator.
type RNGSource struct{ RNG *rand.Rand }

// Gaussian implements Source.
func (s RNGSource) Gaussian(dst []float32, std float64, _ string) error {
	for i := range dst {
		dst[i] = float32(s.RNG.NormFloat64() * std)
	}
	return nil
}

// Learner trains one client's DP-FPL prompts on a frozen CLIP. Several
// clients may share a Learner when they train one at a time (load each
// client's G and L into Params() first). Not safe for concurrent use.
type Learner struct {
	Cfg        Config
	LogitScale float32 // log of the logit multiplier (the model's, by default)

	enc             *prompt.Encoder
	C, E, D         int
	Global, Local   *tensor.Tensor // [n, D]
	gGlobal, gLocal *tensor.Tensor // [n, D]
	ce, ce1         prompt.CosineCE
	ctx, g          []float32 // the last Step's context and ∂loss/∂ctx [n, D]
	// perEx holds the last Step's per-example gradients ∂loss_i/∂ctx
	// [B, n, D] (PerExampleDP with noise on only); perB is B.
	perEx []float32
	perB  int
	txt   []float32 // text features of the last Step [C, E]

	// the last Privatize's factors and their (clipped, noised) gradients
	U, V, Res, Omega, GU, GV []float32
	// NormG, NormU, NormV are the norms before clipping.
	NormG, NormU, NormV float64
	evalTxt             []float32 // Prepare's text features, which Logits scores against
}

// New builds a learner for the class prompts tokens [C, Ctx] (each row the
// tokenised "X X … X {class}." with cfg.NCtx "X"s after the SOT). G and L
// are drawn N(0, InitStd²) in that order from Seed.
func New(m *clip.Model, tokens []int, cfg Config) (*Learner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	enc, err := prompt.NewEncoder(m, tokens, cfg.NCtx)
	if err != nil {
		return nil, fmt.Errorf("dpfpl: %w", err)
	}
	n, D := cfg.NCtx, enc.D
	if cfg.Rank > D {
		return nil, fmt.Errorf("dpfpl: rank %d exceeds the prompt width %d", cfg.Rank, D)
	}
	l := &Learner{Cfg: cfg, LogitScale: m.W.LogitScale, enc: enc, C: enc.R, E: enc.E, D: D,
		Global: tensor.New(n, D), Local: tensor.New(n, D), gGlobal: tensor.New(n, D), gLocal: tensor.New(n, D)}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	for _, p := range []*tensor.Tensor{l.Global, l.Local} {
		for i := range p.Data {
			p.Data[i] = float32(rng.NormFloat64() * cfg.InitStd)
		}
	}
	return l, nil
}

// Params returns the live parameters by reference name.
func (l *Learner) Params() tensor.Named {
	return tensor.Named{ParamGlobal: l.Global, ParamLocal: l.Local}
}

// Grads returns the gradients of the last Step (after Privatize: the
// mechanism's), by parameter name.
func (l *Learner) Grads() tensor.Named {
	return tensor.Named{ParamGlobal: l.gGlobal, ParamLocal: l.gLocal}
}

// composeForward is the prompt's context: ctx = G + L.
//
//	G, L: [n, D]; ctx: [n, D]
func composeForward(ctx, g, loc []float32) {
	for i := range ctx {
		ctx[i] = g[i] + loc[i]
	}
}

// composeBackward: both summands receive the context's gradient.
//
//	dctx: [n, D]; dG, dL: [n, D]
func composeBackward(dG, dL, dctx []float32) {
	copy(dG, dctx)
	copy(dL, dctx)
}

// Step computes the loss of image features imgFeat [B, E] (B = len(labels))
// and sets both gradients to the true ∂loss/∂ctx (Privatize then replaces
// them by the mechanism's). It returns the loss, its terms and the logits
// [B, C] (owned by the learner, valid until the next Step).
func (l *Learner) Step(imgFeat []float32, labels []int) (float64, map[string]float64, []float32, error) {
	B := len(labels)
	if B == 0 {
		return 0, nil, nil, errors.New("dpfpl: empty batch")
	}
	l.ctx = nn.Grow(l.ctx, len(l.Global.Data))
	composeForward(l.ctx, l.Global.Data, l.Local.Data)
	txt, err := l.enc.Forward(l.ctx, 1, true)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("dpfpl: %w", err)
	}
	l.txt = txt
	loss, logits, dTxt, err := l.ce.Loss(imgFeat, txt, B, l.C, l.E, l.LogitScale, labels)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("dpfpl: %w", err)
	}
	l.g = nn.Grow(l.g, len(l.ctx))
	copy(l.g, l.enc.Backward(dTxt))
	composeBackward(l.gGlobal.Data, l.gLocal.Data, l.g)
	l.perB = 0
	if l.Cfg.PerExampleDP && l.Cfg.NoiseStd > 0 {
		if err := l.perExample(imgFeat, labels); err != nil {
			return 0, nil, nil, err
		}
	}
	return loss, map[string]float64{"loss_ce": loss}, logits, nil
}

// perExample fills perEx with each example's ∂loss_i/∂ctx: the encoder's
// backward (linear in its input, at the forward's activations) of each
// example's own ∂loss_i/∂txt.
func (l *Learner) perExample(imgFeat []float32, labels []int) error {
	B, E, nD := len(labels), l.E, len(l.g)
	l.perEx = nn.Grow(l.perEx, B*nD)
	for i := range B {
		_, _, d, err := l.ce1.Loss(imgFeat[i*E:(i+1)*E], l.txt, 1, l.C, E, l.LogitScale, labels[i:i+1])
		if err != nil {
			return fmt.Errorf("dpfpl: example %d: %w", i, err)
		}
		copy(l.perEx[i*nD:(i+1)*nD], l.enc.Backward(d))
	}
	l.perB = B
	return nil
}

// Privatize applies the privacy mechanism to the last Step's gradient
// (see the package doc), drawing Ω and the noise from src: Grads() then
// hold the clipped global gradient and the local context's gradient
// rebuilt from the factors' (clipped, noised) gradients.
func (l *Learner) Privatize(src Source) error {
	n, r, D := l.Cfg.NCtx, l.Cfg.Rank, l.D
	if len(l.g) != n*D {
		return errors.New("dpfpl: privatize before a step")
	}
	l.Omega = nn.Grow(l.Omega, D*r)
	if err := src.Gaussian(l.Omega, 1, "omega"); err != nil {
		return fmt.Errorf("dpfpl: %w", err)
	}
	l.U, l.V, l.Res = nn.Grow(l.U, n*r), nn.Grow(l.V, r*D), nn.Grow(l.Res, n*D)
	factorize(l.U, l.V, l.Res, l.Local.Data, l.Omega, n, D, r)

	// the factors' gradients: backward of U·V with ∂loss/∂(U·V) = g
	l.GU, l.GV = nn.Grow(l.GU, n*r), nn.Grow(l.GV, r*D)
	lowRankBackward(l.GU, l.GV, l.g, l.U, l.V, n, r, D)

	copy(l.gGlobal.Data, l.g)
	l.NormG, l.NormU, l.NormV = norm(l.gGlobal.Data), norm(l.GU), norm(l.GV)
	if l.perB > 0 {
		if err := l.privatizePerExample(src); err != nil {
			return err
		}
	} else if s := l.Cfg.NoiseStd; s > 0 {
		c := l.Cfg.ClipNorm
		clipTo(l.gGlobal.Data, l.NormG, c)
		clipTo(l.GU, l.NormU, c)
		if err := addNoise(src, l.GU, s, "noise_u"); err != nil {
			return err
		}
		clipTo(l.GV, l.NormV, c)
		if err := addNoise(src, l.GV, s, "noise_v"); err != nil {
			return err
		}
	}
	fullGrad(l.gLocal.Data, l.U, l.V, l.GU, l.GV, n, r, D)
	return nil
}

// privatizePerExample is DP-SGD on the three gradients (PerExampleDP):
//
//	grad G = Σ_i clip_C(g_i)/B' + N(0, s²)
//	gU     = Σ_i clip_C(g_i·Vᵀ)/B' + N(0, s²),  gV = Σ_i clip_C(Uᵀ·g_i)/B' + N(0, s²)
//
// with g_i = ∂loss_i/∂ctx and B' = DPBatch.
func (l *Learner) privatizePerExample(src Source) error {
	n, r, D, c := l.Cfg.NCtx, l.Cfg.Rank, l.D, l.Cfg.ClipNorm
	inv := 1 / float64(l.Cfg.DPBatch)
	sumG, sumU, sumV := make([]float64, n*D), make([]float64, n*r), make([]float64, r*D)
	gu, gv := make([]float32, n*r), make([]float32, r*D)
	acc := func(dst []float64, x []float32) {
		scale := inv
		if nrm := norm(x); nrm > c {
			scale *= c / nrm
		}
		for i, v := range x {
			dst[i] += scale * float64(v)
		}
	}
	for i := range l.perB {
		gi := l.perEx[i*n*D : (i+1)*n*D]
		lowRankBackward(gu, gv, gi, l.U, l.V, n, r, D)
		acc(sumG, gi)
		acc(sumU, gu)
		acc(sumV, gv)
	}
	for _, p := range []struct {
		dst  []float32
		sum  []float64
		what string
	}{{l.gGlobal.Data, sumG, "noise_g"}, {l.GU, sumU, "noise_u"}, {l.GV, sumV, "noise_v"}} {
		for i, v := range p.sum {
			p.dst[i] = float32(v)
		}
		if err := addNoise(src, p.dst, l.Cfg.NoiseStd, p.what); err != nil {
			return err
		}
	}
	return nil
}

func addNoise(src Source, x []float32, std float64, what string) error {
	noise := make([]float32, len(x))
	if err := src.Gaussian(noise, std, what); err != nil {
		return fmt.Errorf("dpfpl: %w", err)
	}
	for i, v := range noise {
		x[i] += v
	}
	return nil
}

// norm is the Frobenius norm of x (accumulated in float64).
func norm(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return math.Sqrt(s)
}

// clipTo scales x (of norm nrm) to norm c when nrm > c.
func clipTo(x []float32, nrm, c float64) {
	if nrm <= c {
		return
	}
	scale := float32(c / nrm)
	for i := range x {
		x[i] *= scale
	}
}

// factorize is the code's factorize_ctx: one power iteration from Ω with
// both factors orthonormalised, and the residual.
//
//	L: [n, D]; Ω: [D, r]; U: [n, r]; V: [r, D]; Res: [n, D]
//	U = gs(L·Ω),  V = gs(Lᵀ·U)ᵀ,  Res = L − U·V
func factorize(U, V, Res, L, omega []float32, n, D, r int) {
	u := make([]float64, n*r) // [n, r]
	for i := 0; i < n; i++ {
		for k := 0; k < r; k++ {
			var s float64
			for d := 0; d < D; d++ {
				s += float64(L[i*D+d]) * float64(omega[d*r+k])
			}
			u[i*r+k] = s
		}
	}
	orthogonalize(u, n, r)
	v := make([]float64, D*r) // [D, r]
	for d := 0; d < D; d++ {
		for k := 0; k < r; k++ {
			var s float64
			for i := 0; i < n; i++ {
				s += float64(L[i*D+d]) * u[i*r+k]
			}
			v[d*r+k] = s
		}
	}
	orthogonalize(v, D, r)
	for i, x := range u {
		U[i] = float32(x)
	}
	for d := 0; d < D; d++ {
		for k := 0; k < r; k++ {
			V[k*D+d] = float32(v[d*r+k])
		}
	}
	// Res = L − U·V, with U·V from the float32 factors as the code has them
	for i := 0; i < n; i++ {
		for d := 0; d < D; d++ {
			var s float64
			for k := 0; k < r; k++ {
				s += float64(U[i*r+k]) * float64(V[k*D+d])
			}
			Res[i*D+d] = float32(float64(L[i*D+d]) - s)
		}
	}
}

// orthogonalize is the code's column-wise Gram–Schmidt on m [rows, cols]
// in place: each column in turn is normalised and projected out of the
// columns after it. A zero column stays zero (the code divides by zero).
func orthogonalize(m []float64, rows, cols int) {
	for i := 0; i < cols; i++ {
		var ss float64
		for a := 0; a < rows; a++ {
			ss += m[a*cols+i] * m[a*cols+i]
		}
		if ss == 0 {
			continue
		}
		inv := 1 / math.Sqrt(ss)
		for a := 0; a < rows; a++ {
			m[a*cols+i] *= inv
		}
		for j := i + 1; j < cols; j++ {
			var dot float64
			for a := 0; a < rows; a++ {
				dot += m[a*cols+i] * m[a*cols+j]
			}
			for a := 0; a < rows; a++ {
				m[a*cols+j] -= dot * m[a*cols+i]
			}
		}
	}
}

// lowRankBackward is the backward of P = U·V for ∂loss/∂P = g:
//
//	g: [n, D]; U: [n, r]; V: [r, D]; dU = g·Vᵀ [n, r]; dV = Uᵀ·g [r, D]
func lowRankBackward(dU, dV, g, U, V []float32, n, r, D int) {
	clear(dU)
	clear(dV)
	nn.MatMulBackward(dU, dV, g, U, V, n, r, D)
}

// fullGrad is the code's compute_full_grad: with a = dU/10, b = dV/10,
//
//	out = a·V + U·b + U·(Uᵀ·(a·V))      U: [n, r]; V: [r, D]; out: [n, D]
//
// accumulated in float64.
func fullGrad(out, U, V, dU, dV []float32, n, r, D int) {
	aV := make([]float64, n*D) // a·V
	for i := 0; i < n; i++ {
		for k := 0; k < r; k++ {
			a := float64(dU[i*r+k]) / 10
			for d := 0; d < D; d++ {
				aV[i*D+d] += a * float64(V[k*D+d])
			}
		}
	}
	utaV := make([]float64, r*D) // Uᵀ·(a·V)
	for i := 0; i < n; i++ {
		for k := 0; k < r; k++ {
			u := float64(U[i*r+k])
			for d := 0; d < D; d++ {
				utaV[k*D+d] += u * aV[i*D+d]
			}
		}
	}
	for i := 0; i < n; i++ {
		for d := 0; d < D; d++ {
			s := aV[i*D+d]
			for k := 0; k < r; k++ {
				u := float64(U[i*r+k])
				s += u*float64(dV[k*D+d])/10 + u*utaV[k*D+d]
			}
			out[i*D+d] = float32(s)
		}
	}
}

// TextFeatures returns the raw text features [C, E] of the current prompts
// (G + L; inference; owned by the learner, valid until the next call).
func (l *Learner) TextFeatures() ([]float32, error) {
	l.ctx = nn.Grow(l.ctx, len(l.Global.Data))
	composeForward(l.ctx, l.Global.Data, l.Local.Data)
	f, err := l.enc.Forward(l.ctx, 1, false)
	if err != nil {
		return nil, fmt.Errorf("dpfpl: %w", err)
	}
	return f, nil
}
