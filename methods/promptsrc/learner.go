// Package promptsrc is PromptSRC (Khattak et al., "Self-regulating Prompts:
// Foundational Model Adaptation without Forgetting", ICCV 2023) run
// federated: every client trains independent deep prompts in both encoders
// with the self-regulating losses against the frozen CLIP, and the server
// averages every prompt (FedAvg, weights n_k / Σ n).
//
// The prompts (names as the authors' trainers/promptsrc.py and
// clip/model.py, reproduced exactly by testdata/promptsrc):
//
//	ctx  = prompt_learner.ctx                                        [n_t, Dt]
//	t_k  = text_encoder.transformer.resblocks.k.VPT_shallow, 1≤k<J_t  [n_t, Dt]
//	v_0  = image_encoder.VPT                                         [n_v, Dv]
//	v_k  = image_encoder.transformer.resblocks.k.VPT_shallow, 1≤k<J_v [n_v, Dv]
//
// Text encoder: ctx replaces the token embeddings at positions 1..n_t (the
// positional embedding is added to it); at the input of block k the hidden
// states at positions 1..n_t are replaced by t_k. Image encoder: v_0 is
// appended after the image tokens (no positional embedding) and goes
// through ln_pre with them; at the input of block k the last n_v hidden
// states are replaced by v_k. No coupling between the two (unlike MaPLe).
//
// Loss, for raw features i [B, E], t [C, E], î, t̂ their unit rows, the
// frozen CLIP's image features ẑ_i (no prompts) and the mean over the
// templates of the frozen text features ẑ_t (raw averaged, then
// normalised), s = e^{logit_scale}:
//
//	logits = s·î t̂ᵀ,  zs = s·ẑ_i ẑ_tᵀ                          [B, C]
//	L = CE(logits, y) + λ_t·mean|t̂ − ẑ_t| + λ_i·mean|î − ẑ_i|
//	    + Σ_b KL(softmax(zs_b) ‖ softmax(logits_b)) / (B·C)
//
// (the authors divide the summed KL by the number of logits, not by B).
// The backward pass is exact (input-gradient GEMMs only).
package promptsrc

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/methods/maple"
	"github.com/pfedmma/pfedmma/nn"
	"github.com/pfedmma/pfedmma/tensor"
)

// Reference names of the learned tensors.
const (
	ParamCtx = "prompt_learner.ctx"
	ParamVPT = "image_encoder.VPT"
)

// ParamText is the name of the deep text prompt of block k (1 ≤ k < J_t).
func ParamText(k int) string {
	return "text_encoder.transformer.resblocks." + strconv.Itoa(k) + ".VPT_shallow"
}

// ParamVision is the name of the deep visual prompt of block k (1 ≤ k < J_v).
func ParamVision(k int) string {
	return "image_encoder.transformer.resblocks." + strconv.Itoa(k) + ".VPT_shallow"
}

// Config holds PromptSRC's settings.
type Config struct {
	NCtxText    int     // n_ctx_text: text prompt tokens per layer (4)
	NCtxVision  int     // n_ctx_vision: visual prompt tokens per layer (4)
	DepthText   int     // J_t: text prompt depth, 1 ≤ J_t ≤ blocks (9)
	DepthVision int     // J_v: vision prompt depth, 1 ≤ J_v ≤ blocks (9)
	InitStd     float64 // σ of the N(0, σ²) draw of every prompt (0.02)
	Seed        uint64  // seed of the initial draw
	TextWeight  float64 // λ_t, weight of the text L1 term (25)
	ImageWeight float64 // λ_i, weight of the image L1 term (10)
}

// DefaultConfig returns the authors' ViT-B/16 settings
// (vit_b16_c2_ep20_batch4_4+4ctx).
func DefaultConfig() Config {
	return Config{NCtxText: 4, NCtxVision: 4, DepthText: 9, DepthVision: 9, InitStd: 0.02, TextWeight: 25, ImageWeight: 10}
}

// Validate names the first bad setting against a model with layers blocks
// (0: not checked).
func (c Config) Validate(layers int) error {
	switch {
	case c.NCtxText < 1:
		return fmt.Errorf("promptsrc: n_ctx_text %d: must be at least 1", c.NCtxText)
	case c.NCtxVision < 1:
		return fmt.Errorf("promptsrc: n_ctx_vision %d: must be at least 1", c.NCtxVision)
	case c.DepthText < 1:
		return fmt.Errorf("promptsrc: prompt_depth_text %d: must be at least 1", c.DepthText)
	case c.DepthVision < 1:
		return fmt.Errorf("promptsrc: prompt_depth_vision %d: must be at least 1", c.DepthVision)
	case layers > 0 && c.DepthText > layers:
		return fmt.Errorf("promptsrc: prompt_depth_text %d: the model has only %d blocks", c.DepthText, layers)
	case layers > 0 && c.DepthVision > layers:
		return fmt.Errorf("promptsrc: prompt_depth_vision %d: the model has only %d blocks", c.DepthVision, layers)
	case c.InitStd < 0 || math.IsNaN(c.InitStd):
		return fmt.Errorf("promptsrc: init_std %g: must not be negative", c.InitStd)
	case c.TextWeight < 0 || math.IsNaN(c.TextWeight):
		return fmt.Errorf("promptsrc: text_loss_weight %g: must not be negative", c.TextWeight)
	case c.ImageWeight < 0 || math.IsNaN(c.ImageWeight):
		return fmt.Errorf("promptsrc: image_loss_weight %g: must not be negative", c.ImageWeight)
	}
	return nil
}

// Learner trains one PromptSRC prompt set on a frozen CLIP for one label
// space. Several clients may share a Learner when they train one at a time
// (load a client's tensors into Params first). It is not safe for
// concurrent use.
type Learner struct {
	Cfg        Config
	LogitScale float32 // log of the logit multiplier (the model's)

	m          *clip.Model
	vis        clip.Vision // shared frozen weights, own head buffers
	text       clip.Text
	zsVis      clip.Vision // the frozen image encoder's head (zero-shot features)
	zsStack    clip.Stack  // the frozen image encoder's blocks, private copies
	C, E       int
	Dt, Dv, T0 int
	textT      int // text length run (last EOT + 1)
	eot        []int
	base       []float32 // [C, textT, Dt] token + positional embedding; ctx rows hold the positional embedding only
	zt         []float32 // [C, E] ẑ_t: the templates' mean frozen text feature, normalised

	p, g tensor.Named

	txt, img *maple.Tower
	vdeep    [][]float32 // [J_v][n_v, Dv] (index 0: v_0)
	tdeep    [][]float32 // [J_t][n_t, Dt] (index 0 unused)
	vln      []float32   // [n_v, Dv] ln_pre(v_0)
	vmean    []float32
	vrstd    []float32

	x0t, x0v         []float32
	tf, imf, zi      []float32 // raw text [C, E], image [B, E] features; ẑ_i [B, E] (normalised)
	tn, in, tnr, inr []float32 // unit rows and norms
	logits, zl, dl   []float32
	dtn, din         []float32
	dTxt, dImg, dvln []float32
	scoreTxt         []float32
}

// New builds a learner for the class prompts tokens [C, Ctx] (each row the
// tokenised "X … X {class}." with cfg.NCtxText "X"s after the SOT) and the
// hand-crafted prompts templates [nT·C, Ctx] (template-major: row i·C + c
// is template i of class c), whose frozen text features, averaged over the
// templates, are the text anchor ẑ_t. Every prompt is drawn N(0, σ²).
func New(m *clip.Model, tokens, templates []int, cfg Config) (*Learner, error) {
	wc := m.W.Config
	if m.ResNet != nil || wc.Vision.Layers < 1 {
		return nil, fmt.Errorf("promptsrc: needs a ViT image encoder (its prompts are vision-transformer tokens)")
	}
	if err := cfg.Validate(min(wc.Vision.Layers, wc.Text.Layers)); err != nil {
		return nil, err
	}
	ctxLen, Dt, Dv := wc.Text.ContextLength, wc.Text.Width, wc.Vision.Width
	if len(tokens) == 0 || len(tokens)%ctxLen != 0 {
		return nil, fmt.Errorf("promptsrc: %d token ids is not a whole number of %d-long rows", len(tokens), ctxLen)
	}
	C, nt := len(tokens)/ctxLen, cfg.NCtxText
	if len(templates) == 0 || len(templates)%(C*ctxLen) != 0 {
		return nil, fmt.Errorf("promptsrc: %d template token ids is not a whole number of %d classes × %d", len(templates), C, ctxLen)
	}
	eot := clip.EOTPositions(tokens, C, ctxLen)
	T, err := maple.PromptLength(eot, nt)
	if err != nil {
		return nil, fmt.Errorf("promptsrc: %w", err)
	}
	l := &Learner{Cfg: cfg, LogitScale: m.W.LogitScale, m: m, C: C, E: wc.EmbedDim, Dt: Dt, Dv: Dv,
		T0: m.Vision.Cfg.Tokens(), textT: T, eot: eot}
	full := make([]float32, C*ctxLen*Dt)
	if err := m.Text.TokenEmbed(full, tokens, C); err != nil {
		return nil, fmt.Errorf("promptsrc: %w", err)
	}
	l.base = maple.TextBase(full, m.Text.W.PosEmb, C, ctxLen, T, Dt, nt)
	if err := l.anchor(templates); err != nil {
		return nil, err
	}
	l.vis = clip.Vision{Cfg: m.Vision.Cfg, W: m.Vision.W}
	l.zsVis = clip.Vision{Cfg: m.Vision.Cfg, W: m.Vision.W}
	l.text = clip.Text{Cfg: m.Text.Cfg, W: m.Text.W}
	for _, b := range m.Vision.Stack.Blocks {
		l.zsStack.Blocks = append(l.zsStack.Blocks, b.FrozenCopy())
	}
	l.txt = maple.NewTower(m.Text.Stack.Blocks, cfg.DepthText, 1, nt)
	l.img = maple.NewTower(m.Vision.Stack.Blocks, cfg.DepthVision, l.T0, cfg.NCtxVision)

	l.p, l.g = tensor.Named{}, tensor.Named{}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5c7a1))
	add := func(name string, shape ...int) {
		t := tensor.New(shape...)
		for i := range t.Data {
			t.Data[i] = float32(rng.NormFloat64() * cfg.InitStd)
		}
		l.p[name], l.g[name] = t, tensor.New(shape...)
	}
	add(ParamCtx, nt, Dt)
	for k := 1; k < cfg.DepthText; k++ {
		add(ParamText(k), nt, Dt)
	}
	add(ParamVPT, cfg.NCtxVision, Dv)
	for k := 1; k < cfg.DepthVision; k++ {
		add(ParamVision(k), cfg.NCtxVision, Dv)
	}
	l.tdeep = make([][]float32, cfg.DepthText)
	l.vdeep = make([][]float32, cfg.DepthVision)
	return l, nil
}

// anchor encodes the templates with the frozen CLIP and keeps ẑ_t, the
// normalised mean over the templates of the raw text features.
func (l *Learner) anchor(templates []int) error {
	ctxLen := l.m.W.Config.Text.ContextLength
	R := len(templates) / ctxLen
	f, err := l.m.EncodeText(templates, R)
	if err != nil {
		return fmt.Errorf("promptsrc: the templates' text features: %w", err)
	}
	nT, C, E := R/l.C, l.C, l.E
	l.zt = make([]float32, C*E)
	for i := 0; i < nT; i++ {
		for j, v := range f[i*C*E : (i+1)*C*E] {
			l.zt[j] += v
		}
	}
	for j := range l.zt {
		l.zt[j] /= float32(nT)
	}
	clip.NormalizeRows(nil, l.zt, C, E)
	return nil
}

// Params returns the live parameters by reference name.
func (l *Learner) Params() tensor.Named { return l.p }

// Grads returns the gradients of the last Step by reference name.
func (l *Learner) Grads() tensor.Named { return l.g }

// Shared reports whether the server averages a tensor: all of them are.
func (l *Learner) Shared(string) bool { return true }

// NumClasses is C.
func (l *Learner) NumClasses() int { return l.C }

// TextAnchor returns ẑ_t [C, E] (unit rows; owned by the learner).
func (l *Learner) TextAnchor() []float32 { return l.zt }

// TextFeatures runs the prompted text encoder on the class prompts and
// returns the raw features [C, E] (owned by the learner).
func (l *Learner) TextFeatures(train bool) []float32 {
	C, T, Dt, n := l.C, l.textT, l.Dt, l.Cfg.NCtxText
	l.x0t = maple.TextInput(l.x0t, l.base, l.p[ParamCtx].Data, C, T, Dt, n)
	for k := 1; k < l.Cfg.DepthText; k++ {
		l.tdeep[k] = l.p[ParamText(k)].Data
	}
	pooled := l.txt.Forward(l.x0t, l.tdeep, C, T, l.eot, train)
	l.tf = nn.Grow(l.tf, C*l.E)
	l.text.HeadForward(l.tf, pooled, C)
	return l.tf
}

// ImageFeatures runs the prompted image encoder on B cached prefixes
// (ln_pre output of the image tokens, [B, T0, Dv]) and returns the raw
// features [B, E] (owned by the learner).
func (l *Learner) ImageFeatures(prefix []float32, B int, train bool) []float32 {
	T0, Dv, n := l.T0, l.Dv, l.Cfg.NCtxVision
	T := T0 + n
	l.vdeep[0] = l.p[ParamVPT].Data
	for k := 1; k < l.Cfg.DepthVision; k++ {
		l.vdeep[k] = l.p[ParamVision(k)].Data
	}
	// the prompt rows go through ln_pre with the image tokens (row-wise)
	w := l.m.Vision.W
	l.vln, l.vmean, l.vrstd = nn.Grow(l.vln, n*Dv), nn.Grow(l.vmean, n), nn.Grow(l.vrstd, n)
	nn.LayerNormForward(l.vln, l.vmean, l.vrstd, l.vdeep[0], w.LnPreW, w.LnPreB, n, Dv)
	l.x0v = maple.ImageInput(l.x0v, prefix, l.vln, B, T0, n, Dv)
	pooled := l.img.Forward(l.x0v, l.vdeep, B, T, clip.ClassPool(B), train)
	l.imf = nn.Grow(l.imf, B*l.E)
	l.vis.HeadForward(l.imf, pooled, B)
	return l.imf
}

// ZeroShotImage returns ẑ_i [B, E], the frozen CLIP's image features of B
// cached prefixes (no prompts), normalised (owned by the learner).
func (l *Learner) ZeroShotImage(prefix []float32, B int) []float32 {
	pooled := l.zsStack.Forward(prefix[:B*l.T0*l.Dv], B, l.T0, 0, len(l.zsStack.Blocks), clip.ClassPool(B), false)
	l.zi = nn.Grow(l.zi, B*l.E)
	l.zsVis.HeadForward(l.zi, pooled, B)
	clip.NormalizeRows(nil, l.zi, B, l.E)
	return l.zi
}

// unit returns x's rows [n, d] scaled to unit norm in dst and their norms.
func unit(dst, norms, x []float32, n, d int) ([]float32, []float32) {
	dst = nn.Grow(dst, n*d)
	copy(dst, x[:n*d])
	return dst, clip.NormalizeRows(norms, dst, n, d)
}

// scaledCos writes out[r, c] = s·a_r·b_c for unit rows a [R, E], b [C, E].
func scaledCos(out, a, b []float32, R, C, E int, s float32) {
	for r := 0; r < R; r++ {
		for c := 0; c < C; c++ {
			var d float32
			for k := 0; k < E; k++ {
				d += a[r*E+k] * b[c*E+k]
			}
			out[r*C+c] = s * d
		}
	}
}

// l1 returns mean|a − b| over n values and adds w·sign(a − b)/n to da.
func l1(da, a, b []float32, n int, w float64) float64 {
	var s float64
	g := float32(w / float64(n))
	for i := 0; i < n; i++ {
		d := a[i] - b[i]
		s += math.Abs(float64(d))
		switch {
		case d > 0:
			da[i] += g
		case d < 0:
			da[i] -= g
		}
	}
	return s / float64(n)
}

// klSum returns Σ_b Σ_c q_bc (log q_bc − log p_bc) for p = softmax(logits),
// q = softmax(zs) over the rows [B, C] and adds (p − q)·scale to dl.
func klSum(dl, logits, zs []float32, B, C int, scale float32) float64 {
	var kl float64
	for b := 0; b < B; b++ {
		lp := logSoftmax(logits[b*C : (b+1)*C])
		lq := logSoftmax(zs[b*C : (b+1)*C])
		for c := 0; c < C; c++ {
			q := math.Exp(lq[c])
			kl += q * (lq[c] - lp[c])
			dl[b*C+c] += float32(math.Exp(lp[c])-q) * scale
		}
	}
	return kl
}

func logSoftmax(row []float32) []float64 {
	mx := row[0]
	for _, v := range row {
		mx = max(mx, v)
	}
	var s float64
	for _, v := range row {
		s += math.Exp(float64(v - mx))
	}
	lse := float64(mx) + math.Log(s)
	out := make([]float64, len(row))
	for i, v := range row {
		out[i] = float64(v) - lse
	}
	return out
}

// Loss terms reported by Step (the unweighted parts, as the fixture records
// them).
const (
	TermCE      = "loss_ce"
	TermL1Text  = "l1_text"
	TermL1Image = "l1_image"
	TermKLSum   = "kl_sum"
	TermSCL     = "loss_scl_logits"
)

// Step computes PromptSRC's loss on B cached image prefixes [B, T0, Dv]
// and overwrites Grads with its exact gradient. It returns the loss, its
// terms (TermCE …) and the logits [B, C] (owned by the learner).
func (l *Learner) Step(prefix []float32, labels []int) (float64, map[string]float64, []float32, error) {
	B, C, E := len(labels), l.C, l.E
	if len(prefix) < B*l.T0*l.Dv {
		return 0, nil, nil, fmt.Errorf("promptsrc: %d prefix values for %d images of %d × %d", len(prefix), B, l.T0, l.Dv)
	}
	for i, y := range labels {
		if y < 0 || y >= C {
			return 0, nil, nil, fmt.Errorf("promptsrc: label %d of sample %d outside 0..%d", y, i, C-1)
		}
	}
	zi := l.ZeroShotImage(prefix, B)
	txt := l.TextFeatures(true)
	img := l.ImageFeatures(prefix, B, true)
	s := float32(math.Exp(float64(l.LogitScale)))
	l.tn, l.tnr = unit(l.tn, l.tnr, txt, C, E)
	l.in, l.inr = unit(l.in, l.inr, img, B, E)
	// logits = s·î t̂ᵀ, zs = s·ẑ_i ẑ_tᵀ                               [B, C]
	l.logits, l.zl, l.dl = nn.Grow(l.logits, B*C), nn.Grow(l.zl, B*C), nn.Grow(l.dl, B*C)
	scaledCos(l.logits, l.in, l.tn, B, C, E, s)
	scaledCos(l.zl, zi, l.zt, B, C, E, s)
	ce := clip.CrossEntropy(l.logits, labels, B, C, l.dl)
	kl := klSum(l.dl, l.logits, l.zl, B, C, 1/float32(B*C))
	// dî = s·dl·t̂, dt̂ = s·dlᵀ·î, then the L1 terms' sign gradients
	l.din, l.dtn = nn.Grow(l.din, B*E), nn.Grow(l.dtn, C*E)
	clear(l.din)
	clear(l.dtn)
	for b := 0; b < B; b++ {
		for c := 0; c < C; c++ {
			g := s * l.dl[b*C+c]
			for k := 0; k < E; k++ {
				l.din[b*E+k] += g * l.tn[c*E+k]
				l.dtn[c*E+k] += g * l.in[b*E+k]
			}
		}
	}
	l1t := l1(l.dtn, l.tn, l.zt, C*E, l.Cfg.TextWeight)
	l1i := l1(l.din, l.in, zi, B*E, l.Cfg.ImageWeight)
	l.dTxt, l.dImg = nn.Grow(l.dTxt, C*E), nn.Grow(l.dImg, B*E)
	clip.NormBackward(l.dTxt, l.dtn, l.tn, l.tnr, C, E)
	clip.NormBackward(l.dImg, l.din, l.in, l.inr, B, E)
	for _, t := range l.g {
		clear(t.Data)
	}
	l.backward(B)
	scl := kl / float64(B*C)
	loss := ce + l.Cfg.TextWeight*l1t + l.Cfg.ImageWeight*l1i + scl
	terms := map[string]float64{TermCE: ce, TermL1Text: l1t, TermL1Image: l1i, TermKLSum: kl, TermSCL: scl}
	return loss, terms, l.logits, nil
}

// backward propagates dImg and dTxt to every prompt.
func (l *Learner) backward(B int) {
	nt, nv, Dt, Dv, C, T := l.Cfg.NCtxText, l.Cfg.NCtxVision, l.Dt, l.Dv, l.C, l.textT
	// image side: dx0 → ln_pre(v_0) rows summed over images → v_0
	dx0 := l.img.Backward(l.vis.HeadBackward(l.dImg))
	l.dvln = maple.ImagePromptGrad(l.dvln, dx0, B, l.T0, nv, Dv)
	w := l.m.Vision.W
	nn.LayerNormBackward(l.g[ParamVPT].Data, nil, nil, l.dvln, l.vdeep[0], l.vmean, l.vrstd, w.LnPreW, nv, Dv)
	for k := 1; k < l.Cfg.DepthVision; k++ {
		copy(l.g[ParamVision(k)].Data, l.img.PromptGrad(k))
	}
	// text side: dx0 rows 1..n summed over classes → ctx
	dxt := l.txt.Backward(l.text.HeadBackward(l.dTxt))
	maple.AddContextGrad(l.g[ParamCtx].Data, dxt, C, T, Dt, nt)
	for k := 1; k < l.Cfg.DepthText; k++ {
		copy(l.g[ParamText(k)].Data, l.txt.PromptGrad(k))
	}
}

// Prepare computes the class text features for scoring (after loading the
// parameters); Logits then scores cached image prefixes.
func (l *Learner) Prepare() error {
	l.scoreTxt = append(l.scoreTxt[:0], l.TextFeatures(false)...)
	return nil
}

// Logits scores B cached image prefixes [B, T0, Dv] against the classes
// with the features of the last Prepare: [B, C] (a new slice).
func (l *Learner) Logits(prefix []float32, B int) ([]float32, error) {
	if len(prefix) < B*l.T0*l.Dv {
		return nil, fmt.Errorf("promptsrc: %d prefix values for %d images of %d × %d", len(prefix), B, l.T0, l.Dv)
	}
	img := l.ImageFeatures(prefix, B, false)
	return clip.Logits(img, l.scoreTxt, B, l.C, l.E, l.LogitScale), nil
}
