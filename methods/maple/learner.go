// Package maple is MaPLe (Khattak et al., "MaPLe: Multi-modal Prompt
// Learning", CVPR 2023) run federated as the FLiP and PMFLT benchmarks do:
// every client trains the whole multi-modal prompt learner and the server
// averages all of it (FedAvg, weights n_k / Σ n); nothing is private.
//
// The prompts, for prompt depth J and n_ctx tokens (names as in the
// authors' trainers/maple.py, reproduced exactly by testdata/maple):
//
//	ctx  = prompt_learner.ctx                                   [n, Dt]
//	t_k  = prompt_learner.compound_prompts_text.{k−1}, k=1..J−1 [n, Dt]
//	v_0  = ctx · Wᵀ + b          (prompt_learner.proj)           [n, Dv]
//	v_k  = t_k · W_kᵀ + b_k      (compound_prompt_projections.{k−1})
//
// Text encoder: ctx replaces the token embeddings at positions 1..n (the
// positional embedding is added to it); at the input of each block k =
// 1..J−1 the hidden states at positions 1..n are replaced by t_k (no
// positional embedding). Image encoder: the n rows v_0 are appended after the
// patch tokens (no positional embedding) and go through ln_pre with them; at
// the input of each block k = 1..J−1 the last n hidden states are replaced by
// v_k. Blocks k ≥ J carry the prompt rows' outputs along. Then CLIP's heads,
// logits = e^{logit_scale}·cos and the mean cross entropy.
//
// Both encoders run every step: the image side from the frozen ln_pre output
// of the image tokens (cached per image), the text side from the token
// embeddings. The backward pass is exact (the blocks' input-gradient GEMMs
// only; no weight gradients).
//
// Where this differs from the authors' code, on purpose (reference/maple/README.md
// lists their bugs):
//   - float32 by default. Their configs run fp16 (the only precision that
//     runs as shipped: PREC fp32 crashes on the fp16 proj), with ctx and proj
//     as fp16 parameters. engine.precision bf16 (Model.SetPrecision before
//     New) runs only the frozen blocks' weight products of both encoders,
//     forward and input gradient, in bfloat16 with float32 accumulation; the
//     prompts, the couplings, LayerNorm, softmax, the heads and the loss stay
//     float32.
//   - Widths come from the model (the code hard-codes ViT-B/16's 512/768).
//   - ctx_init as the code: with n_ctx ≤ 4 the prompts are
//     "{ctx_init} {class}." and ctx starts as the token embeddings of their
//     first n_ctx words (the config's "a photo of a" with n_ctx 2 learns
//     "a photo" and keeps "of a" frozen); otherwise "X … X {class}." with
//     ctx drawn N(0, σ²).
//   - Federated as FLiP/PMFLT run it: FedAvg of every tensor.
package maple

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/nn"
	"github.com/pfedmma/pfedmma/tensor"
)

// Reference names of the prompt learner's tensors.
const (
	ParamCtx   = "prompt_learner.ctx"
	ParamProjW = "prompt_learner.proj.weight"
	ParamProjB = "prompt_learner.proj.bias"
)

// ParamText is the name of the deep text prompt of block k (1 ≤ k < J).
func ParamText(k int) string { return "prompt_learner.compound_prompts_text." + strconv.Itoa(k-1) }

// ParamCouple is the name of the weight ("weight") or bias ("bias") of the
// coupling that maps the deep text prompt of block k to the visual one.
func ParamCouple(k int, what string) string {
	return "prompt_learner.compound_prompt_projections." + strconv.Itoa(k-1) + "." + what
}

// Config holds MaPLe's settings.
type Config struct {
	NCtx    int     // n_ctx: prompt tokens per layer (the authors' 2)
	Depth   int     // J: prompt depth in both encoders, 1 ≤ J ≤ blocks (9)
	InitStd float64 // σ of the N(0, σ²) draw of ctx and the deep text prompts (0.02)
	Seed    uint64  // seed of the initial draw
	// CtxFromTokens initialises ctx with the frozen token embeddings at
	// positions 1..n of the class prompts (the authors' CTX_INIT: the
	// prompts start with the init words) instead of drawing it.
	CtxFromTokens bool
}

// DefaultConfig returns the authors' settings (vit_b16_c2_ep5_batch4_2ctx).
func DefaultConfig() Config { return Config{NCtx: 2, Depth: 9, InitStd: 0.02} }

// Validate names the first bad setting against a model with layers blocks.
func (c Config) Validate(layers int) error {
	switch {
	case c.NCtx < 1:
		return fmt.Errorf("maple: n_ctx %d: must be at least 1", c.NCtx)
	case c.Depth < 1:
		return fmt.Errorf("maple: prompt_depth %d: must be at least 1", c.Depth)
	case layers > 0 && c.Depth > layers:
		return fmt.Errorf("maple: prompt_depth %d: the model has only %d blocks", c.Depth, layers)
	case c.InitStd < 0 || math.IsNaN(c.InitStd):
		return fmt.Errorf("maple: init_std %g: must not be negative", c.InitStd)
	}
	return nil
}

// Tower runs one encoder's blocks with n prompt rows per sequence replaced
// at the input of blocks 1..J−1 (MaPLe's deep-prompt tower; PromptSRC's
// learner runs it too). Segment s < J−1 is block s alone; the last
// segment is blocks J−1..L−1 (pooled). The blocks are private copies
// (Block.FrozenCopy) that share the frozen weights and run in the precision
// the model had when the learner was made: after Model.SetPrecision(BF16)
// their weight products, forward and input gradient, run in bfloat16 with
// float32 accumulation.
type Tower struct {
	segs []clip.Stack
	off  int // first prompt position of every sequence
	n, D int
	B, T int

	in   [][]float32  // [J][B, T, D] input of each segment
	dbuf [2][]float32 // [B, T, D] backward ping-pong
	dp   [][]float32  // [J][n, D] gradients at the prompt rows
}

// NewTower returns the tower of blocks with J prompted segments and n prompt
// rows per sequence starting at position off.
func NewTower(blocks []*clip.Block, J, off, n int) *Tower {
	t := &Tower{off: off, n: n, D: blocks[0].D}
	for s := 0; s < J-1; s++ {
		t.segs = append(t.segs, clip.Stack{Blocks: []*clip.Block{blocks[s].FrozenCopy()}})
	}
	var last clip.Stack
	for _, b := range blocks[J-1:] {
		last.Blocks = append(last.Blocks, b.FrozenCopy())
	}
	t.segs = append(t.segs, last)
	t.in = make([][]float32, len(t.segs))
	t.dp = make([][]float32, len(t.segs))
	return t
}

// Forward runs x0 [B, T, D] (the first block's input, prompt rows already in
// place) with deep[s] [n, D] replacing the prompt rows at the input of
// segment s ≥ 1, pools the last block at pool and returns [B, D].
func (t *Tower) Forward(x0 []float32, deep [][]float32, B, T int, pool []int, train bool) []float32 {
	t.B, t.T = B, T
	D, n := t.D, t.n
	x := x0
	for s := range t.segs {
		if s > 0 {
			// x_s = x_{s−1} with rows off..off+n of every sequence := deep[s]
			t.in[s] = nn.Grow(t.in[s], B*T*D)
			copy(t.in[s], x[:B*T*D])
			for b := 0; b < B; b++ {
				copy(t.in[s][(b*T+t.off)*D:(b*T+t.off+n)*D], deep[s])
			}
			x = t.in[s]
		}
		var p []int
		if s == len(t.segs)-1 {
			p = pool
		}
		// segments run in turn, each with its own stack: the graph is kept
		// for backward
		x = t.segs[s].Forward(x, B, T, 0, len(t.segs[s].Blocks), p, train)
	}
	return x
}

// Backward takes the gradient at the pooled output [B, D] and returns the
// gradient at x0 [B, T, D] (owned by t); PromptGrad(s), s ≥ 1, receives
// the gradients of deep[s] summed over the sequences.
func (t *Tower) Backward(dpool []float32) []float32 {
	B, T, D, n := t.B, t.T, t.D, t.n
	g := dpool
	for s := len(t.segs) - 1; s >= 0; s-- {
		k := s % 2
		t.dbuf[k] = nn.Grow(t.dbuf[k], B*T*D)
		d := t.dbuf[k]
		clear(d)
		t.segs[s].Backward(d, g)
		if s > 0 {
			// the replaced rows: their gradient goes to deep[s], none upstream
			t.dp[s] = nn.Grow(t.dp[s], n*D)
			clear(t.dp[s])
			for b := 0; b < B; b++ {
				rows := d[(b*T+t.off)*D : (b*T+t.off+n)*D]
				for i, v := range rows {
					t.dp[s][i] += v
				}
				clear(rows)
			}
		}
		g = d
	}
	return g
}

// PromptGrad returns the gradient of deep[s] [n, D] from the last Backward
// (owned by t; nil for s = 0).
func (t *Tower) PromptGrad(s int) []float32 { return t.dp[s] }

// Learner trains one MaPLe prompt learner on a frozen CLIP for one label
// space. Several clients may share a Learner when they train one at a time
// (load a client's tensors into Params first). Its blocks and heads are
// private copies sharing the frozen weights, so other users of the model do
// not disturb its activations. It is not safe for concurrent use.
type Learner struct {
	Cfg        Config
	LogitScale float32 // log of the logit multiplier (the model's)

	m          *clip.Model
	vis        clip.Vision // shared frozen weights, own head buffers
	text       clip.Text   // shared frozen weights, own head buffers
	C, E       int
	Dt, Dv, T0 int // text width, vision width, image tokens
	textT      int // text length run (last EOT + 1)
	eot        []int
	base       []float32 // [C, textT, Dt] token + positional embedding; ctx rows hold the positional embedding only

	p, g tensor.Named

	txt, img *Tower
	vp       [][]float32 // [J][n, Dv] visual prompts v_0..v_{J−1}
	vln      []float32   // [n, Dv] ln_pre(v_0)
	vmean    []float32
	vrstd    []float32
	tdeep    [][]float32 // [J][n, Dt] (index 0 unused)

	x0t, x0v   []float32
	tf, imf    []float32 // raw features [C, E], [B, E]
	dTxt, dImg []float32
	dl, dvln   []float32
	dv0        []float32
	scoreTxt   []float32 // [C, E] text features of the last Prepare
	head       clip.CosineLogits
}

// New builds a learner for the class prompts tokens [C, Ctx] (each row the
// tokenised "X … X {class}." with cfg.NCtx "X"s after the SOT). ctx and the
// deep text prompts are drawn N(0, σ²), then the couplings as PyTorch's
// nn.Linear default (U(±1/√Dt) for weight and bias); as in the authors'
// code (_get_clones) every deep coupling starts as a copy of one draw.
func New(m *clip.Model, tokens []int, cfg Config) (*Learner, error) {
	wc := m.W.Config
	L := min(wc.Vision.Layers, wc.Text.Layers)
	if err := cfg.Validate(L); err != nil {
		return nil, err
	}
	ctxLen, Dt, Dv := wc.Text.ContextLength, wc.Text.Width, wc.Vision.Width
	if len(tokens) == 0 || len(tokens)%ctxLen != 0 {
		return nil, fmt.Errorf("maple: %d token ids is not a whole number of %d-long rows", len(tokens), ctxLen)
	}
	C, n, J := len(tokens)/ctxLen, cfg.NCtx, cfg.Depth
	eot := clip.EOTPositions(tokens, C, ctxLen)
	T, err := PromptLength(eot, n)
	if err != nil {
		return nil, fmt.Errorf("maple: %w", err)
	}
	l := &Learner{Cfg: cfg, LogitScale: m.W.LogitScale, m: m, C: C, E: wc.EmbedDim, Dt: Dt, Dv: Dv,
		T0: m.Vision.Cfg.Tokens(), textT: T, eot: eot}
	full := make([]float32, C*ctxLen*Dt)
	if err := m.Text.TokenEmbed(full, tokens, C); err != nil {
		return nil, fmt.Errorf("maple: %w", err)
	}
	l.base = TextBase(full, m.Text.W.PosEmb, C, ctxLen, T, Dt, n)
	l.vis = clip.Vision{Cfg: m.Vision.Cfg, W: m.Vision.W}
	l.text = clip.Text{Cfg: m.Text.Cfg, W: m.Text.W}
	l.txt = NewTower(m.Text.Stack.Blocks, J, 1, n)
	l.img = NewTower(m.Vision.Stack.Blocks, J, l.T0, n)

	l.p, l.g = tensor.Named{}, tensor.Named{}
	add := func(name string, shape ...int) {
		l.p[name], l.g[name] = tensor.New(shape...), tensor.New(shape...)
	}
	add(ParamCtx, n, Dt)
	add(ParamProjW, Dv, Dt)
	add(ParamProjB, Dv)
	for k := 1; k < J; k++ {
		add(ParamText(k), n, Dt)
		add(ParamCouple(k, "weight"), Dv, Dt)
		add(ParamCouple(k, "bias"), Dv)
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x3a91e))
	normal := func(t *tensor.Tensor) {
		for i := range t.Data {
			t.Data[i] = float32(rng.NormFloat64() * cfg.InitStd)
		}
	}
	bound := 1 / math.Sqrt(float64(Dt))
	uniform := func(t *tensor.Tensor) {
		for i := range t.Data {
			t.Data[i] = float32((2*rng.Float64() - 1) * bound)
		}
	}
	normal(l.p[ParamCtx])
	if cfg.CtxFromTokens {
		// the same words start every prompt: row 0's embeddings at 1..n
		copy(l.p[ParamCtx].Data, full[Dt:(1+n)*Dt])
	}
	uniform(l.p[ParamProjW])
	uniform(l.p[ParamProjB])
	for k := 1; k < J; k++ {
		normal(l.p[ParamText(k)])
	}
	if J > 1 {
		uniform(l.p[ParamCouple(1, "weight")])
		uniform(l.p[ParamCouple(1, "bias")])
		for k := 2; k < J; k++ {
			copy(l.p[ParamCouple(k, "weight")].Data, l.p[ParamCouple(1, "weight")].Data)
			copy(l.p[ParamCouple(k, "bias")].Data, l.p[ParamCouple(1, "bias")].Data)
		}
	}
	l.vp = make([][]float32, J)
	l.tdeep = make([][]float32, J)
	return l, nil
}

// PromptLength returns T, the text positions the class prompts need (one
// past the last EOT in eot), or an error naming the first prompt whose EOT
// falls among the n context positions 1..n.
func PromptLength(eot []int, n int) (int, error) {
	T := 0
	for r, p := range eot {
		if p <= n {
			return 0, fmt.Errorf("class prompt %d: EOT at position %d, but the %d context tokens take positions 1..%d", r, p, n, n)
		}
		T = max(T, p+1)
	}
	return T, nil
}

// TextBase is each class prompt's first T token embeddings (of full, C
// rows of ctxLen) plus the positional embeddings pos, with the n context
// positions after SOT zeroed (the learned context goes there).
func TextBase(full, pos []float32, C, ctxLen, T, Dt, n int) []float32 {
	base := make([]float32, C*T*Dt)
	for r := 0; r < C; r++ {
		row := base[r*T*Dt : (r+1)*T*Dt]
		copy(row, full[r*ctxLen*Dt:r*ctxLen*Dt+T*Dt])
		clear(row[Dt : (1+n)*Dt])
		for i, p := range pos[:T*Dt] {
			row[i] += p
		}
	}
	return base
}

// TextInput returns the text encoder's input [C, T, Dt] in x0 (grown):
// x0[r, t] = base[r, t] (+ ctx[t−1] for t in 1..n).
func TextInput(x0, base, ctx []float32, C, T, Dt, n int) []float32 {
	x0 = nn.Grow(x0, C*T*Dt)
	copy(x0, base)
	for r := 0; r < C; r++ {
		x := x0[(r*T+1)*Dt : (r*T+1+n)*Dt]
		for i, v := range ctx[:n*Dt] {
			x[i] += v
		}
	}
	return x0
}

// AddContextGrad adds to dctx [n, Dt] the gradient at the text input dx0
// [C, T, Dt] of the context rows 1..n, summed over the classes.
func AddContextGrad(dctx, dx0 []float32, C, T, Dt, n int) {
	for r := 0; r < C; r++ {
		for i, v := range dx0[(r*T+1)*Dt : (r*T+1+n)*Dt] {
			dctx[i] += v
		}
	}
}

// ImageInput returns the image encoder's input [B, T0+n, Dv] in x0 (grown):
// x0[b] = [prefix[b]; vln], with prefix the cached ln_pre output [B, T0, Dv]
// and vln the n prompt rows through ln_pre [n, Dv].
func ImageInput(x0, prefix, vln []float32, B, T0, n, Dv int) []float32 {
	T := T0 + n
	x0 = nn.Grow(x0, B*T*Dv)
	for b := 0; b < B; b++ {
		copy(x0[b*T*Dv:(b*T+T0)*Dv], prefix[b*T0*Dv:(b+1)*T0*Dv])
		copy(x0[(b*T+T0)*Dv:(b+1)*T*Dv], vln)
	}
	return x0
}

// ImagePromptGrad returns in dst (grown) the gradient at the n prompt rows
// [n, Dv] of the image encoder's input gradient dx0 [B, T0+n, Dv], summed
// over the images.
func ImagePromptGrad(dst, dx0 []float32, B, T0, n, Dv int) []float32 {
	Ti := T0 + n
	dst = nn.Grow(dst, n*Dv)
	clear(dst)
	for b := 0; b < B; b++ {
		for i, v := range dx0[(b*Ti+T0)*Dv : (b+1)*Ti*Dv] {
			dst[i] += v
		}
	}
	return dst
}

// Params returns the live parameters by reference name.
func (l *Learner) Params() tensor.Named { return l.p }

// Grads returns the gradients of the last Step by reference name.
func (l *Learner) Grads() tensor.Named { return l.g }

// Shared reports whether the server averages a tensor: all of them are.
func (l *Learner) Shared(string) bool { return true }

// NumClasses is C.
func (l *Learner) NumClasses() int { return l.C }

// Couple computes the visual prompts v_k = t_k·W_kᵀ + b_k (v_0 from ctx)
// and returns them, [J][n, Dv] (owned by the learner).
func (l *Learner) Couple() [][]float32 {
	n, Dt, Dv := l.Cfg.NCtx, l.Dt, l.Dv
	for k := range l.vp {
		in, w, b := l.p[ParamCtx], l.p[ParamProjW], l.p[ParamProjB]
		if k > 0 {
			in, w, b = l.p[ParamText(k)], l.p[ParamCouple(k, "weight")], l.p[ParamCouple(k, "bias")]
			l.tdeep[k] = in.Data
		}
		l.vp[k] = nn.Grow(l.vp[k], n*Dv)
		nn.LinearForward(l.vp[k], in.Data, w.Data, b.Data, n, Dt, Dv)
	}
	return l.vp
}

// TextFeatures runs the prompted text encoder on the class prompts and
// returns the raw features [C, E] (owned by the learner). Call Couple first.
func (l *Learner) TextFeatures(train bool) []float32 {
	C, T, Dt, n := l.C, l.textT, l.Dt, l.Cfg.NCtx
	l.x0t = TextInput(l.x0t, l.base, l.p[ParamCtx].Data, C, T, Dt, n)
	pooled := l.txt.Forward(l.x0t, l.tdeep, C, T, l.eot, train)
	l.tf = nn.Grow(l.tf, C*l.E)
	l.text.HeadForward(l.tf, pooled, C)
	return l.tf
}

// ImageFeatures runs the prompted image encoder on B cached prefixes
// (ln_pre output of the image tokens, [B, T0, Dv]) and returns the raw
// features [B, E] (owned by the learner). Call Couple first.
func (l *Learner) ImageFeatures(prefix []float32, B int, train bool) []float32 {
	T0, Dv, n := l.T0, l.Dv, l.Cfg.NCtx
	T := T0 + n
	// the prompt rows go through ln_pre with the image tokens (row-wise)
	w := l.m.Vision.W
	l.vln, l.vmean, l.vrstd = nn.Grow(l.vln, n*Dv), nn.Grow(l.vmean, n), nn.Grow(l.vrstd, n)
	nn.LayerNormForward(l.vln, l.vmean, l.vrstd, l.vp[0], w.LnPreW, w.LnPreB, n, Dv)
	l.x0v = ImageInput(l.x0v, prefix, l.vln, B, T0, n, Dv)
	pooled := l.img.Forward(l.x0v, l.vp, B, T, clip.ClassPool(B), train)
	l.imf = nn.Grow(l.imf, B*l.E)
	l.vis.HeadForward(l.imf, pooled, B)
	return l.imf
}

// Step computes the mean cross entropy of B cached image prefixes
// [B, T0, Dv] against the classes and overwrites Grads with its exact
// gradient. It returns the loss, no other terms, and the logits [B, C]
// (owned by the learner).
func (l *Learner) Step(prefix []float32, labels []int) (float64, map[string]float64, []float32, error) {
	B, C, E := len(labels), l.C, l.E
	if len(prefix) < B*l.T0*l.Dv {
		return 0, nil, nil, fmt.Errorf("maple: %d prefix values for %d images of %d × %d", len(prefix), B, l.T0, l.Dv)
	}
	for i, y := range labels {
		if y < 0 || y >= C {
			return 0, nil, nil, fmt.Errorf("maple: label %d of sample %d outside 0..%d", y, i, C-1)
		}
	}
	l.Couple()
	txt := l.TextFeatures(true)
	img := l.ImageFeatures(prefix, B, true)
	logits := l.head.Forward(img, txt, B, C, E, l.LogitScale)
	l.dl = nn.Grow(l.dl, B*C)
	loss := clip.CrossEntropy(logits, labels, B, C, l.dl)
	l.dImg, l.dTxt = nn.Grow(l.dImg, B*E), nn.Grow(l.dTxt, C*E)
	l.head.Backward(l.dl, l.dImg, l.dTxt)
	for _, t := range l.g {
		clear(t.Data)
	}
	l.backward(B)
	return loss, nil, logits, nil
}

// backward propagates dImg and dTxt to every prompt-learner tensor.
func (l *Learner) backward(B int) {
	n, Dt, Dv, C, T := l.Cfg.NCtx, l.Dt, l.Dv, l.C, l.textT
	J := l.Cfg.Depth
	// image side: dx0 → ln_pre(v_0) rows summed over images → v_0
	dx0 := l.img.Backward(l.vis.HeadBackward(l.dImg))
	l.dvln = ImagePromptGrad(l.dvln, dx0, B, l.T0, n, Dv)
	l.dv0 = nn.Grow(l.dv0, n*Dv)
	clear(l.dv0)
	w := l.m.Vision.W
	nn.LayerNormBackward(l.dv0, nil, nil, l.dvln, l.vp[0], l.vmean, l.vrstd, w.LnPreW, n, Dv)
	// text side: dx0 rows 1..n summed over classes → ctx
	dxt := l.txt.Backward(l.text.HeadBackward(l.dTxt))
	dctx := l.g[ParamCtx].Data
	AddContextGrad(dctx, dxt, C, T, Dt, n)
	// couplings: v_0 = ctx·Wᵀ + b; v_k = t_k·W_kᵀ + b_k
	nn.LinearBackward(dctx, l.g[ParamProjW].Data, l.g[ParamProjB].Data, l.dv0, l.p[ParamCtx].Data, l.p[ParamProjW].Data, n, Dt, Dv)
	for k := 1; k < J; k++ {
		dt := l.g[ParamText(k)].Data
		copy(dt, l.txt.PromptGrad(k))
		nn.LinearBackward(dt, l.g[ParamCouple(k, "weight")].Data, l.g[ParamCouple(k, "bias")].Data, l.img.PromptGrad(k),
			l.p[ParamText(k)].Data, l.p[ParamCouple(k, "weight")].Data, n, Dt, Dv)
	}
}

// Prepare computes the class text features for scoring (after loading the
// parameters); Logits then scores cached image prefixes.
func (l *Learner) Prepare() error {
	l.Couple()
	l.scoreTxt = append(l.scoreTxt[:0], l.TextFeatures(false)...)
	return nil
}

// Logits scores B cached image prefixes [B, T0, Dv] against the classes
// with the features of the last Prepare: [B, C] (a new slice).
func (l *Learner) Logits(prefix []float32, B int) ([]float32, error) {
	if len(prefix) < B*l.T0*l.Dv {
		return nil, fmt.Errorf("maple: %d prefix values for %d images of %d × %d", len(prefix), B, l.T0, l.Dv)
	}
	img := l.ImageFeatures(prefix, B, false)
	return clip.Logits(img, l.scoreTxt, B, l.C, l.E, l.LogitScale), nil
}
