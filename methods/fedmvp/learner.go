// Package fedmvp is FedMVP (Singha et al., "FedMVP: Federated Multi-modal
// Visual Prompt Tuning for Vision-Language Models", ICCV 2025) as its
// authors' code (mainaksingha01/FedMVP, model/FedMVP.py) runs it: a
// PromptFormer turns each image's patch embeddings, attending to the text
// features of its label space's class descriptions, into K = 4 visual
// prompts appended to the frozen image encoder's input; classes are scored
// by the mean cosine to their descriptions; a consistency term pulls the
// prompted image feature towards zero-shot CLIP's feature of a randomly
// flipped view. The server averages the whole prompt learner with uniform
// weights (the authors' server.py).
//
// For a batch of B images with patch embeddings x_patch [B, P, Dv] (ln_pre's
// input, positions added) and N description rows d_n of C classes:
//
//	t_n   = normalize(CLIP_text(d_n))                         [N, E] frozen
//	vis   = PromptFormer(x_patch, t)                          [B, K, Dv]
//	f     = CLIP_image([x; vis])  (ln_pre on every row)       [B, E]
//	logit = e^{logit_scale} · f̂ · mean_{n∈c} t_n              [B, C]
//	L     = CE(logit, y) + α·(1 − mean_b cos(f, z_b))
//
// with z_b zero-shot CLIP's feature of image b, horizontally flipped with
// probability flip_prob (one coin per batch, as torchvision's
// RandomHorizontalFlip on the batch tensor).
//
// The LoRA switch (client.py): a client whose last training batch of a
// round had a loss below lora_threshold freezes the cross-attention block
// and from then on trains rank-r LoRA factors on its query, key and value
// inputs (q_in = x + x·A·B, likewise for the keys and values), with the
// linear map; the switch is the client's own state (kept across rounds, not
// shared), the server averages every tensor either way, and the global model
// (what the authors' server evaluates) runs without LoRA.
//
// Reproduced exactly by testdata/fedmvp (the authors' modules on clip-tiny).
// Where this differs from the authors' code, on purpose (reference/fedmvp/README.md
// lists their bugs):
//   - float32 throughout, widths from the model (the code hard-codes
//     ViT-B/16's 768/512 and casts the PromptFormer to fp16);
//   - every batch takes an optimizer step (their train() back-propagates only
//     the last batch of a round) and the switch follows the round's steps;
//   - after the switch the cross-attention block is frozen outright (under
//     torch 1.x their "frozen" block keeps receiving weight decay and
//     momentum);
//   - a site scores with its own switch (its personalised model);
//   - class descriptions come from a deterministic table (descriptions.go),
//     not from LLM-written JSON files.
package fedmvp

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/nn"
	"github.com/pfedmma/pfedmma/tensor"
)

// Config holds FedMVP's model settings.
type Config struct {
	Alpha   float64 // α, weight of the consistency term (the authors' 10)
	Heads   int     // cross-attention heads (4)
	Rank    int     // LoRA rank r (8)
	Prompts int     // K, visual prompts pooled from the patches (4)
	Seed    uint64  // seed of the initial draw
}

// DefaultConfig returns the authors' settings.
func DefaultConfig() Config { return Config{Alpha: 10, Heads: 4, Rank: 8, Prompts: 4} }

// Validate names the first bad setting for a vision width Dv and P patches.
func (c Config) Validate(Dv, P int) error {
	switch {
	case !(c.Alpha >= 0) || math.IsInf(c.Alpha, 0):
		return fmt.Errorf("fedmvp: alpha %g: must be a finite number ≥ 0", c.Alpha)
	case c.Heads < 1 || (Dv > 0 && Dv%c.Heads != 0):
		return fmt.Errorf("fedmvp: heads %d: must divide the vision width %d", c.Heads, Dv)
	case c.Rank < 1:
		return fmt.Errorf("fedmvp: lora_rank %d: must be at least 1", c.Rank)
	case c.Prompts < 1 || (P > 0 && c.Prompts > P):
		return fmt.Errorf("fedmvp: prompts %d: must be between 1 and the model's %d patches", c.Prompts, P)
	}
	return nil
}

// Learner trains one FedMVP prompt learner on a frozen CLIP for one label
// space (its class descriptions). Clients of a space share it and train one
// at a time, loading their tensors (and mode) first. It is not safe for
// concurrent use.
type Learner struct {
	Cfg        Config
	LogitScale float32 // log of the logit multiplier (the model's)
	// LoRA selects the mode: the cross-attention block frozen and the LoRA
	// factors trained and applied. Flip selects the mirrored zero-shot
	// feature as the consistency target of the next Step.
	LoRA, Flip bool

	m        *clip.Model
	vis      clip.Vision // shared frozen weights, own head buffers
	stack    clip.Stack  // private block copies
	C, N     int
	E, Dv    int
	T0, P, K int
	text     []float32 // [N, E] normalised description features
	classEmb []float32 // [C, E] mean description feature per class
	rowClass []int

	p, g tensor.Named
	pf   *promptFormer

	// forward state
	B                     int
	xpatch, pvis          []float32 // [B, P, Dv], [B, K, Dv]
	xin, x0, vmean, vrstd []float32
	feat, fhat, zhat      []float32
	fnorm                 []float64
	dl, dfeat, dx0, dpvis []float32
	terms                 map[string]float64
	lastLoss              float64 // loss of the last Step
}

// New builds a learner for C classes whose descriptions' frozen text
// features (unnormalised CLIP text features, one row each) are text [N, E],
// row n describing class rowClass[n]. The tensors start as PyTorch's
// defaults for the authors' modules, drawn from cfg.Seed.
func New(m *clip.Model, text []float32, rowClass []int, C int, cfg Config) (*Learner, error) {
	wc := m.W.Config
	if m.ResNet != nil || wc.Vision.Layers < 1 {
		return nil, fmt.Errorf("fedmvp: needs a ViT image encoder")
	}
	Dv, E := wc.Vision.Width, wc.EmbedDim
	T0 := wc.Vision.Tokens()
	if err := cfg.Validate(Dv, T0-1); err != nil {
		return nil, err
	}
	N := len(rowClass)
	if N == 0 || len(text) != N*E {
		return nil, fmt.Errorf("fedmvp: %d description features for %d rows of %d", len(text), N, E)
	}
	count := make([]int, C)
	for n, c := range rowClass {
		if c < 0 || c >= C {
			return nil, fmt.Errorf("fedmvp: description row %d belongs to class %d, outside 0..%d", n, c, C-1)
		}
		count[c]++
	}
	for c, k := range count {
		if k == 0 {
			return nil, fmt.Errorf("fedmvp: class %d has no description", c)
		}
	}
	l := &Learner{Cfg: cfg, LogitScale: m.W.LogitScale, m: m, C: C, N: N, E: E, Dv: Dv, T0: T0, P: T0 - 1, K: cfg.Prompts,
		rowClass: append([]int(nil), rowClass...)}
	// t_n = t_n/‖t_n‖ (F.normalize); classEmb_c = mean of its rows
	l.text = make([]float32, N*E)
	l.classEmb = make([]float32, C*E)
	for n := 0; n < N; n++ {
		row := text[n*E : (n+1)*E]
		var ss float64
		for _, v := range row {
			ss += float64(v) * float64(v)
		}
		inv := 1 / math.Max(math.Sqrt(ss), 1e-12)
		for j, v := range row {
			l.text[n*E+j] = float32(float64(v) * inv)
		}
		nn.AddScaledInto(l.classEmb[rowClass[n]*E:(rowClass[n]+1)*E], l.text[n*E:(n+1)*E], 1/float32(count[rowClass[n]]))
	}
	l.vis = clip.Vision{Cfg: m.Vision.Cfg, W: m.Vision.W}
	// private copies of the image blocks (their activations are the
	// learner's) in the model's precision: bf16 frozen products when the
	// model runs in bf16
	for _, b := range m.Vision.Stack.Blocks {
		l.stack.Blocks = append(l.stack.Blocks, b.FrozenCopy())
	}
	l.pf = newPromptFormer(Dv, E, cfg.Heads, cfg.Rank, cfg.Prompts, N, T0-1)
	l.initParams()
	return l, nil
}

// initParams draws the tensors as PyTorch initialises the authors' modules:
// nn.Linear U(±1/√in) for weights and biases, LayerNorm 1 and 0,
// MultiheadAttention's in_proj Xavier-uniform with zero biases and its
// out_proj U(±1/√Dv) with a zero bias, the LoRA factors N(0, 0.02²).
func (l *Learner) initParams() {
	Dv, E, F, r := l.Dv, l.E, 4*l.Dv, l.Cfg.Rank
	l.p, l.g = tensor.Named{}, tensor.Named{}
	add := func(name string, shape ...int) *tensor.Tensor {
		l.p[name], l.g[name] = tensor.New(shape...), tensor.New(shape...)
		return l.p[name]
	}
	rng := rand.New(rand.NewPCG(l.Cfg.Seed, 0xfed3f9))
	uniform := func(t *tensor.Tensor, bound float64) {
		for i := range t.Data {
			t.Data[i] = float32((2*rng.Float64() - 1) * bound)
		}
	}
	ones := func(t *tensor.Tensor) {
		for i := range t.Data {
			t.Data[i] = 1
		}
	}
	uniform(add(ParamLinW, Dv, E), 1/math.Sqrt(float64(E)))
	uniform(add(ParamLinB, Dv), 1/math.Sqrt(float64(E)))
	ones(add(ParamNormQW, Dv))
	add(ParamNormQB, Dv)
	ones(add(ParamNormKW, Dv))
	add(ParamNormKB, Dv)
	uniform(add(ParamInW, 3*Dv, Dv), math.Sqrt(6/float64(4*Dv)))
	add(ParamInB, 3*Dv)
	uniform(add(ParamOutW, Dv, Dv), 1/math.Sqrt(float64(Dv)))
	add(ParamOutB, Dv)
	ones(add(ParamNormFW, Dv))
	add(ParamNormFB, Dv)
	uniform(add(ParamFF1W, 2*F, Dv), 1/math.Sqrt(float64(Dv)))
	uniform(add(ParamFF1B, 2*F), 1/math.Sqrt(float64(Dv)))
	uniform(add(ParamFF2W, Dv, F), 1/math.Sqrt(float64(F)))
	uniform(add(ParamFF2B, Dv), 1/math.Sqrt(float64(F)))
	for _, name := range []string{ParamQA, ParamQB, ParamKA, ParamKB, ParamVA, ParamVB} {
		shape := []int{Dv, r}
		if name == ParamQB || name == ParamKB || name == ParamVB {
			shape = []int{r, Dv}
		}
		t := add(name, shape...)
		for i := range t.Data {
			t.Data[i] = float32(rng.NormFloat64() * 0.02)
		}
	}
}

// Params returns the live parameters by reference name.
func (l *Learner) Params() tensor.Named { return l.p }

// Grads returns the gradients of the last Step by reference name.
func (l *Learner) Grads() tensor.Named { return l.g }

// Trained reports whether the current mode trains a tensor: the linear map
// always, the cross-attention block before the LoRA switch, the LoRA
// factors after it.
func Trained(name string, lora bool) bool {
	switch {
	case len(name) > len(crossAttnPrefix) && name[:len(crossAttnPrefix)] == crossAttnPrefix:
		return !lora
	case len(name) > len(loraPrefix) && name[:len(loraPrefix)] == loraPrefix:
		return lora
	}
	return true
}

// RecordLen is the length of one image record (methods.Embeddings): ln_pre's
// input [T0, Dv], the zero-shot feature [E] and that of the mirror [E].
func (l *Learner) RecordLen() int { return l.T0*l.Dv + 2*l.E }

// ImageFeatures runs the PromptFormer and the prompted image encoder on B
// records and returns the raw features [B, E] (owned by the learner).
// kvForward must have run for the current parameters and mode.
func (l *Learner) ImageFeatures(rec []float32, B int, train bool) []float32 {
	T0, P, K, Dv, n := l.T0, l.P, l.K, l.Dv, l.RecordLen()
	T := T0 + K
	l.B = B
	// x_patch[b] = record rows 1..P                                       [B, P, Dv]
	l.xpatch = nn.Grow(l.xpatch, B*P*Dv)
	for b := 0; b < B; b++ {
		copy(l.xpatch[b*P*Dv:(b+1)*P*Dv], rec[b*n+Dv:b*n+T0*Dv])
	}
	l.pvis = nn.Grow(l.pvis, B*K*Dv)
	l.pf.forward(l.pvis, l.xpatch, l.p, B)
	// x0[b] = ln_pre([x_emb[b]; vis[b]])                                  [B, T0+K, Dv]
	w := l.m.Vision.W
	l.xin, l.x0 = nn.Grow(l.xin, B*T*Dv), nn.Grow(l.x0, B*T*Dv)
	l.vmean, l.vrstd = nn.Grow(l.vmean, B*T), nn.Grow(l.vrstd, B*T)
	for b := 0; b < B; b++ {
		copy(l.xin[b*T*Dv:(b*T+T0)*Dv], rec[b*n:b*n+T0*Dv])
		copy(l.xin[(b*T+T0)*Dv:(b+1)*T*Dv], l.pvis[b*K*Dv:(b+1)*K*Dv])
	}
	nn.LayerNormForward(l.x0, l.vmean, l.vrstd, l.xin, w.LnPreW, w.LnPreB, B*T, Dv)
	pooled := l.stack.Forward(l.x0, B, T, 0, len(l.stack.Blocks), clip.ClassPool(B), train)
	l.feat = nn.Grow(l.feat, B*l.E)
	l.vis.HeadForward(l.feat, pooled, B)
	return l.feat
}

// normalizeRows writes x/‖x‖ of B rows of E into out and returns the norms.
func normalizeRows(out, x []float32, B, E int, norms []float64) []float64 {
	norms = norms[:0]
	for b := 0; b < B; b++ {
		var ss float64
		for _, v := range x[b*E : (b+1)*E] {
			ss += float64(v) * float64(v)
		}
		nrm := math.Sqrt(ss)
		norms = append(norms, nrm)
		for j, v := range x[b*E : (b+1)*E] {
			out[b*E+j] = float32(float64(v) / nrm)
		}
	}
	return norms
}

// classLogits is e^{logit_scale}·f̂·classEmbᵀ [B, C].
func (l *Learner) classLogits(fhat []float32, B int) []float32 {
	out := make([]float32, B*l.C)
	nn.MatMulForward(out, fhat, transpose(l.classEmb, l.C, l.E), B, l.E, l.C)
	s := float32(math.Exp(float64(l.LogitScale)))
	for i := range out {
		out[i] *= s
	}
	return out
}

func transpose(x []float32, R, C int) []float32 {
	out := make([]float32, R*C)
	for i := 0; i < R; i++ {
		for j := 0; j < C; j++ {
			out[j*R+i] = x[i*C+j]
		}
	}
	return out
}

// Prepare computes the keys' and values' side for the current parameters
// and mode; Logits then scores records.
func (l *Learner) Prepare() error {
	l.pf.lora = l.LoRA
	l.pf.kvForward(l.p, l.text)
	return nil
}

// Logits scores B records against the classes with the state of the last
// Prepare: [B, C] (a new slice).
func (l *Learner) Logits(rec []float32, B int) ([]float32, error) {
	if len(rec) < B*l.RecordLen() {
		return nil, fmt.Errorf("fedmvp: %d record values for %d images of %d", len(rec), B, l.RecordLen())
	}
	f := l.ImageFeatures(rec, B, false)
	l.fhat = nn.Grow(l.fhat, B*l.E)
	l.fnorm = normalizeRows(l.fhat, f, B, l.E, l.fnorm)
	return l.classLogits(l.fhat, B), nil
}

// Step computes L = CE + α·(1 − mean cos(f, z)) of B records and
// overwrites Grads with its exact gradient (zero for the tensors the mode
// freezes). It returns the loss, its terms ("ce", "vis_score") and the
// logits [B, C].
func (l *Learner) Step(rec []float32, labels []int) (float64, map[string]float64, []float32, error) {
	B, C, E := len(labels), l.C, l.E
	n := l.RecordLen()
	if len(rec) < B*n {
		return 0, nil, nil, fmt.Errorf("fedmvp: %d record values for %d images of %d", len(rec), B, n)
	}
	for i, y := range labels {
		if y < 0 || y >= C {
			return 0, nil, nil, fmt.Errorf("fedmvp: label %d of sample %d outside 0..%d", y, i, C-1)
		}
	}
	if err := l.Prepare(); err != nil {
		return 0, nil, nil, err
	}
	f := l.ImageFeatures(rec, B, true)
	l.fhat = nn.Grow(l.fhat, B*E)
	l.fnorm = normalizeRows(l.fhat, f, B, E, l.fnorm)
	logits := l.classLogits(l.fhat, B)
	l.dl = nn.Grow(l.dl, B*C)
	ce := clip.CrossEntropy(logits, labels, B, C, l.dl)
	// ẑ_b: the zero-shot feature of image b or of its mirror, normalised
	off := l.T0 * l.Dv
	if l.Flip {
		off += E
	}
	z := make([]float32, B*E)
	for b := 0; b < B; b++ {
		copy(z[b*E:(b+1)*E], rec[b*n+off:b*n+off+E])
	}
	l.zhat = nn.Grow(l.zhat, B*E)
	normalizeRows(l.zhat, z, B, E, nil)
	var cosSum float64
	for b := 0; b < B; b++ {
		var d float64
		for j := 0; j < E; j++ {
			d += float64(l.fhat[b*E+j]) * float64(l.zhat[b*E+j])
		}
		cosSum += d
	}
	visScore := 1 - cosSum/float64(B)
	loss := ce + l.Cfg.Alpha*visScore
	l.terms = map[string]float64{"ce": ce, "vis_score": visScore}
	l.lastLoss = loss

	// df̂ = e^{s}·dlogits·classEmb − (α/B)·ẑ; df = (df̂ − f̂(f̂·df̂))/‖f‖   [B, E]
	s := float32(math.Exp(float64(l.LogitScale)))
	dfhat := make([]float32, B*E)
	nn.MatMulForward(dfhat, l.dl, l.classEmb, B, C, E)
	for i := range dfhat {
		dfhat[i] = dfhat[i]*s - float32(l.Cfg.Alpha/float64(B))*l.zhat[i]
	}
	l.dfeat = nn.Grow(l.dfeat, B*E)
	for b := 0; b < B; b++ {
		fh, d := l.fhat[b*E:(b+1)*E], dfhat[b*E:(b+1)*E]
		var dot float64
		for j := range d {
			dot += float64(fh[j]) * float64(d[j])
		}
		for j := range d {
			l.dfeat[b*E+j] = float32((float64(d[j]) - float64(fh[j])*dot) / l.fnorm[b])
		}
	}
	for _, t := range l.g {
		clear(t.Data)
	}
	l.backward(B)
	return loss, l.terms, logits, nil
}

// backward propagates dfeat through the image encoder to the prompt rows
// and the PromptFormer.
func (l *Learner) backward(B int) {
	T0, K, Dv := l.T0, l.K, l.Dv
	T := T0 + K
	dpooled := l.vis.HeadBackward(l.dfeat)
	l.dx0 = nn.Grow(l.dx0, B*T*Dv)
	clear(l.dx0)
	l.stack.Backward(l.dx0, dpooled)
	// the prompt rows' ln_pre (the image rows are frozen)
	w := l.m.Vision.W
	l.dpvis = nn.Grow(l.dpvis, B*K*Dv)
	clear(l.dpvis)
	for b := 0; b < B; b++ {
		r := b*T + T0
		nn.LayerNormBackward(l.dpvis[b*K*Dv:(b+1)*K*Dv], nil, nil, l.dx0[r*Dv:(r+K)*Dv], l.pvis[b*K*Dv:(b+1)*K*Dv],
			l.vmean[r:r+K], l.vrstd[r:r+K], w.LnPreW, K, Dv)
	}
	l.pf.backward(l.g, l.p, l.dpvis)
}
