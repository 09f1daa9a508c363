// Package fedpgp is the math of FedPGP (Cui et al., "Harmonizing
// Generalization and Personalization in Federated Prompt Learning", ICML
// 2024) as the authors' trainer (trainers/fedpgp.py) computes it: a global
// context sigma, averaged by the server, plus a personal low-rank part U·V
// that stays on the client, and a contrastive term that keeps the global
// prompt near the literal prompt and away from the personal one.
//
// Parameters keep the code's leading num_prompt axis N: U [N, n_ctx, b],
// V [N, b, D], sigma [N, n_ctx, D], drawn N(0, 0.02²) in that order. Text
// rows are prompt-major (row n·C + c is prompt n with class c). Per step,
// for image features I [B, E]:
//
//	f_P = text(sigma + U·V), f_G = text(sigma)                       [N·C, E]
//	f_0 = text(frozen token embedding of "X X … X {class}.")         [N·C, E] (constant)
//	logits  = exp(logit_scale)·cos(I, f_P)                            [B, N·C]
//	loss_ce = CE(logits, y)
//	s⁺ = cos(f_0, f_G), s⁻ = cos(f_G, f_P)                            [N·C]
//	loss_con = mean_r CE([s⁺_r, s⁻_r]/τ, 0)
//	loss = loss_ce + μ·loss_con
//
// with no stop-gradient: sigma is reached through f_P and f_G, U and V
// through f_P. With N > 1 the logits have N·C columns, as in the reference
// (labels index the first C, prompt 0).
//
// Defaults: n_ctx 16, τ 0.5, N 1 from the code's argparse, and b 8, μ 0.5
// from the repository's run scripts (argparse: b 4, μ 1); see
// specs/baselines.md §3.
package fedpgp

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
	ParamU     = "prompt_learner.U"
	ParamV     = "prompt_learner.V"
	ParamSigma = "prompt_learner.sigma"
)

// Config holds FedPGP's settings.
type Config struct {
	NCtx       int     // n_ctx: learned context tokens (16)
	Bottleneck int     // bottleneck: rank b of U·V (8)
	NumPrompt  int     // num_prompt: N (1)
	Mu         float64 // mu: weight of the contrastive term (0.5)
	Temp       float64 // temp: τ of the contrastive term (0.5)
	InitStd    float64 // init_std: U, V, sigma drawn N(0, InitStd²) (0.02)
	Seed       uint64  // seed of that draw
	// Position is CoOp's class_token_position of every learned prompt (f_P,
	// f_G): "end" (default, also ""), "middle" or "front" (see
	// prompt.NewEncoderAt). The anchor f_0 stays the literal "X … X
	// {class}." in its written order, as the authors' code keeps it.
	Position string
}

// DefaultConfig returns the run scripts' settings (see the package doc).
func DefaultConfig() Config {
	return Config{NCtx: 16, Bottleneck: 8, NumPrompt: 1, Mu: 0.5, Temp: 0.5, InitStd: 0.02, Position: prompt.PositionEnd}
}

// Validate names the first bad setting.
func (c Config) Validate() error {
	switch {
	case c.NCtx < 1:
		return fmt.Errorf("fedpgp: n_ctx %d: must be at least 1", c.NCtx)
	case c.Bottleneck < 1:
		return fmt.Errorf("fedpgp: bottleneck %d: must be at least 1", c.Bottleneck)
	case c.NumPrompt < 1:
		return fmt.Errorf("fedpgp: num_prompt %d: must be at least 1", c.NumPrompt)
	case !(c.Mu >= 0) || math.IsInf(c.Mu, 0):
		return fmt.Errorf("fedpgp: mu %g: must not be negative", c.Mu)
	case !(c.Temp > 0) || math.IsInf(c.Temp, 0):
		return fmt.Errorf("fedpgp: temp %g: must be positive", c.Temp)
	case !(c.InitStd >= 0) || math.IsInf(c.InitStd, 0):
		return fmt.Errorf("fedpgp: init_std %g: must not be negative", c.InitStd)
	}
	if c.Position != "" {
		if err := prompt.CheckPosition(c.Position); err != nil {
			return fmt.Errorf("fedpgp: %w", err)
		}
	}
	return nil
}

// position is Position with "" read as "end".
func (c Config) position() string {
	if c.Position == "" {
		return prompt.PositionEnd
	}
	return c.Position
}

// Learner trains one client's FedPGP prompts on a frozen CLIP. f_P and f_G
// run as one batch of 2·N·C rows through one prompt.Encoder (groups
// 0..N−1 carry sigma + U·V, groups N..2N−1 sigma). Several clients may share
// a Learner when they train one at a time (load each client's U, V, sigma
// into Params() first). Not safe for concurrent use.
type Learner struct {
	Cfg        Config
	LogitScale float32 // log of the logit multiplier (the model's, by default)

	model           *clip.Model
	tokens          []int           // [N·C, Ctx]: the class prompts once per prompt
	enc             *prompt.Encoder // training: f_P and f_G rows
	evalEnc         *prompt.Encoder // inference: f_P rows only
	C, E, D, R      int             // classes, feature dim, width, rows N·C
	U, V, Sigma     *tensor.Tensor
	gU, gV, gSigma  *tensor.Tensor
	f0              []float32 // [R, E] anchor features
	ctx             []float32 // [2N, n_ctx, D]
	uv              []float32 // [N, n_ctx, D]
	dFeat           []float32 // [2R, E]
	pos, neg, dPos  []float32 // [R]
	dNeg            []float32
	ce              prompt.CosineCE
	fP, fG          []float32 // views of the last Step's features
	lossCE, lossCon float64
	evalTxt         []float32 // Prepare's text features, which Logits scores against
}

// New builds a learner for the class prompts tokens [C, Ctx] (each row the
// tokenised "X X … X {class}." with cfg.NCtx "X"s after the SOT; the "X"
// embeddings form the anchor f_0). U, V, sigma are drawn N(0, InitStd²) in
// that order from Seed.
func New(m *clip.Model, tokens []int, cfg Config) (*Learner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctxLen := m.Text.Cfg.ContextLength
	if len(tokens) == 0 || len(tokens)%ctxLen != 0 {
		return nil, fmt.Errorf("fedpgp: %d token ids is not a whole number of %d-long rows", len(tokens), ctxLen)
	}
	N := cfg.NumPrompt
	rows := make([]int, 0, 2*N*len(tokens)) // tokens repeated 2N times: f_P rows, then f_G rows
	for i := 0; i < 2*N; i++ {
		rows = append(rows, tokens...)
	}
	enc, err := prompt.NewEncoderAt(m, rows, cfg.NCtx, cfg.position())
	if err != nil {
		return nil, fmt.Errorf("fedpgp: %w", err)
	}
	n, b, D := cfg.NCtx, cfg.Bottleneck, enc.D
	l := &Learner{Cfg: cfg, LogitScale: m.W.LogitScale, enc: enc, model: m, tokens: rows[:len(rows)/2],
		C: len(tokens) / ctxLen, E: enc.E, D: D, R: enc.R / 2,
		U: tensor.New(N, n, b), V: tensor.New(N, b, D), Sigma: tensor.New(N, n, D),
		gU: tensor.New(N, n, b), gV: tensor.New(N, b, D), gSigma: tensor.New(N, n, D)}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	for _, p := range []*tensor.Tensor{l.U, l.V, l.Sigma} {
		for i := range p.Data {
			p.Data[i] = float32(rng.NormFloat64() * cfg.InitStd)
		}
	}
	// f_0: the literal prompts "X … X {class}." (in that order whatever the
	// position: the authors' anchor is the unrearranged token embedding),
	// encoded once.
	anchor := enc
	if cfg.position() != prompt.PositionEnd {
		if anchor, err = prompt.NewEncoder(m, rows[:len(rows)/2], cfg.NCtx); err != nil {
			return nil, fmt.Errorf("fedpgp: anchor: %w", err)
		}
	}
	f, err := anchor.Forward(anchor.TokenContext(), anchor.R, false)
	if err != nil {
		return nil, fmt.Errorf("fedpgp: anchor: %w", err)
	}
	l.f0 = append([]float32(nil), f[:l.R*l.E]...)
	return l, nil
}

// Params returns the live parameters by reference name.
func (l *Learner) Params() tensor.Named {
	return tensor.Named{ParamU: l.U, ParamV: l.V, ParamSigma: l.Sigma}
}

// Grads returns the gradients of the last Step, by parameter name.
func (l *Learner) Grads() tensor.Named {
	return tensor.Named{ParamU: l.gU, ParamV: l.gV, ParamSigma: l.gSigma}
}

// Shared reports whether the server averages a parameter: only sigma.
func (l *Learner) Shared(name string) bool { return name == ParamSigma }

// contexts writes ctx = [sigma + U·V ; sigma] ([2N, n_ctx, D]) and keeps U·V.
func (l *Learner) contexts() {
	N, n, b, D := l.Cfg.NumPrompt, l.Cfg.NCtx, l.Cfg.Bottleneck, l.D
	l.uv = nn.Grow(l.uv, N*n*D)
	l.ctx = nn.Grow(l.ctx, 2*N*n*D)
	for p := 0; p < N; p++ {
		// UV[p] = U[p] [n, b] @ V[p] [b, D]
		nn.MatMulForward(l.uv[p*n*D:(p+1)*n*D], l.U.Data[p*n*b:(p+1)*n*b], l.V.Data[p*b*D:(p+1)*b*D], n, b, D)
	}
	for i, s := range l.Sigma.Data {
		l.ctx[i] = l.uv[i] + s
	}
	copy(l.ctx[N*n*D:], l.Sigma.Data)
}

// Step computes the loss of image features imgFeat [B, E] (B = len(labels))
// and overwrites Grads(). It returns the loss, its terms ("loss_ce",
// "loss_con", and the means "cos_pos", "cos_neg") and the logits [B, N·C]
// (owned by the learner, valid until the next Step).
func (l *Learner) Step(imgFeat []float32, labels []int) (float64, map[string]float64, []float32, error) {
	B := len(labels)
	if B == 0 {
		return 0, nil, nil, errors.New("fedpgp: empty batch")
	}
	for i, y := range labels {
		if y < 0 || y >= l.C {
			return 0, nil, nil, fmt.Errorf("fedpgp: label %d of sample %d outside 0..%d", y, i, l.C-1)
		}
	}
	N, n, b, D, R, E := l.Cfg.NumPrompt, l.Cfg.NCtx, l.Cfg.Bottleneck, l.D, l.R, l.E
	l.contexts()
	feat, err := l.enc.Forward(l.ctx, 2*N, true)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("fedpgp: %w", err)
	}
	l.fP, l.fG = feat[:R*E], feat[R*E:2*R*E]

	// loss_ce and its gradient with respect to f_P
	lossCE, logits, dP, err := l.ce.Loss(imgFeat, l.fP, B, R, E, l.LogitScale, labels)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("fedpgp: %w", err)
	}
	l.dFeat = nn.Grow(l.dFeat, 2*R*E)
	copy(l.dFeat, dP)
	dG := l.dFeat[R*E:]
	clear(dG)

	// loss_con = mean_r CE([s⁺, s⁻]/τ, 0); with p = softmax([s⁺, s⁻]/τ):
	// ∂/∂s⁺ = (p₀ − 1)/(τR), ∂/∂s⁻ = p₁/(τR)
	l.pos, l.neg = nn.Grow(l.pos, R), nn.Grow(l.neg, R)
	l.dPos, l.dNeg = nn.Grow(l.dPos, R), nn.Grow(l.dNeg, R)
	prompt.Cosines(l.pos, l.f0, l.fG, R, E)
	prompt.Cosines(l.neg, l.fG, l.fP, R, E)
	tau, mu := l.Cfg.Temp, l.Cfg.Mu
	var lossCon, sumPos, sumNeg float64
	for r := 0; r < R; r++ {
		a, c := float64(l.pos[r])/tau, float64(l.neg[r])/tau
		m := math.Max(a, c)
		lse := m + math.Log(math.Exp(a-m)+math.Exp(c-m))
		lossCon += lse - a
		p0, p1 := math.Exp(a-lse), math.Exp(c-lse)
		l.dPos[r] = float32(mu * (p0 - 1) / (tau * float64(R)))
		l.dNeg[r] = float32(mu * p1 / (tau * float64(R)))
		sumPos += float64(l.pos[r])
		sumNeg += float64(l.neg[r])
	}
	lossCon /= float64(R)
	prompt.CosinesBackward(nil, dG, l.dPos, l.f0, l.fG, R, E)
	prompt.CosinesBackward(dG, l.dFeat[:R*E], l.dNeg, l.fG, l.fP, R, E)

	// back through the text encoder to [sigma + UV ; sigma]
	dctx := l.enc.Backward(l.dFeat)
	for i := range l.gSigma.Data {
		l.gSigma.Data[i] = dctx[i] + dctx[N*n*D+i]
	}
	clear(l.gU.Data)
	clear(l.gV.Data)
	for p := 0; p < N; p++ {
		// dU[p] += dUV[p] · V[p]ᵀ, dV[p] += U[p]ᵀ · dUV[p]
		nn.MatMulBackward(l.gU.Data[p*n*b:(p+1)*n*b], l.gV.Data[p*b*D:(p+1)*b*D], dctx[p*n*D:(p+1)*n*D],
			l.U.Data[p*n*b:(p+1)*n*b], l.V.Data[p*b*D:(p+1)*b*D], n, b, D)
	}
	l.lossCE, l.lossCon = lossCE, lossCon
	terms := map[string]float64{"loss_ce": lossCE, "loss_con": lossCon,
		"cos_pos": sumPos / float64(R), "cos_neg": sumNeg / float64(R)}
	return lossCE + mu*lossCon, terms, logits, nil
}

// TextFeatures returns the raw text features f_P [N·C, E] for the current
// prompts (inference; owned by the learner, valid until the next call). It
// runs only the N·C rows of f_P, on an encoder of its own made on first use.
func (l *Learner) TextFeatures() ([]float32, error) {
	if l.evalEnc == nil {
		var err error
		if l.evalEnc, err = prompt.NewEncoderAt(l.model, l.tokens, l.Cfg.NCtx, l.Cfg.position()); err != nil {
			return nil, fmt.Errorf("fedpgp: %w", err)
		}
	}
	l.contexts()
	N, n, D := l.Cfg.NumPrompt, l.Cfg.NCtx, l.D
	f, err := l.evalEnc.Forward(l.ctx[:N*n*D], N, false)
	if err != nil {
		return nil, fmt.Errorf("fedpgp: %w", err)
	}
	return f, nil
}

// AnchorFeatures returns f_0 [N·C, E], the literal prompts' features.
func (l *Learner) AnchorFeatures() []float32 { return l.f0 }
