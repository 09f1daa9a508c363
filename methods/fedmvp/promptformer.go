package fedmvp

import (
	"github.com/pfedmma/pfedmma/nn"
	"github.com/pfedmma/pfedmma/tensor"
)

// Reference names of the prompt learner's tensors (the authors'
// PromptLearner state dict under "prompt_learner.").
const (
	ParamLinW   = "prompt_learner.linear.weight"                                       // [Dv, E]
	ParamLinB   = "prompt_learner.linear.bias"                                         // [Dv]
	ParamNormQW = "prompt_learner.crossattn.cross_attend_blocks.0.norm.weight"         // [Dv]
	ParamNormQB = "prompt_learner.crossattn.cross_attend_blocks.0.norm.bias"           // [Dv]
	ParamNormKW = "prompt_learner.crossattn.cross_attend_blocks.0.norm_context.weight" // [Dv]
	ParamNormKB = "prompt_learner.crossattn.cross_attend_blocks.0.norm_context.bias"   // [Dv]
	ParamInW    = "prompt_learner.crossattn.cross_attend_blocks.0.fn.in_proj_weight"   // [3Dv, Dv]
	ParamInB    = "prompt_learner.crossattn.cross_attend_blocks.0.fn.in_proj_bias"     // [3Dv]
	ParamOutW   = "prompt_learner.crossattn.cross_attend_blocks.0.fn.out_proj.weight"  // [Dv, Dv]
	ParamOutB   = "prompt_learner.crossattn.cross_attend_blocks.0.fn.out_proj.bias"    // [Dv]
	ParamNormFW = "prompt_learner.crossattn.cross_attend_blocks.1.net.0.weight"        // [Dv]
	ParamNormFB = "prompt_learner.crossattn.cross_attend_blocks.1.net.0.bias"          // [Dv]
	ParamFF1W   = "prompt_learner.crossattn.cross_attend_blocks.1.net.1.weight"        // [2F, Dv]
	ParamFF1B   = "prompt_learner.crossattn.cross_attend_blocks.1.net.1.bias"          // [2F]
	ParamFF2W   = "prompt_learner.crossattn.cross_attend_blocks.1.net.3.weight"        // [Dv, F]
	ParamFF2B   = "prompt_learner.crossattn.cross_attend_blocks.1.net.3.bias"          // [Dv]
	// LoRA factors of the cross-attention's query, key and value inputs.
	ParamQA = "prompt_learner.cross_loraparams.cross_queryA" // [Dv, r]
	ParamQB = "prompt_learner.cross_loraparams.cross_queryB" // [r, Dv]
	ParamKA = "prompt_learner.cross_loraparams.cross_keyA"
	ParamKB = "prompt_learner.cross_loraparams.cross_keyB"
	ParamVA = "prompt_learner.cross_loraparams.cross_valueA"
	ParamVB = "prompt_learner.cross_loraparams.cross_valueB"
)

// Prefix starts the name of every tensor of the prompt learner.
const Prefix = "prompt_learner."

// crossAttnPrefix starts the names of the PromptFormer's cross-attention
// block (frozen once a client switches to LoRA).
const crossAttnPrefix = "prompt_learner.crossattn."

// loraPrefix starts the names of the LoRA factors (trained only after the
// switch).
const loraPrefix = "prompt_learner.cross_loraparams."

// promptFormer is the authors' PromptLearner + CrossAttention: the patch
// embeddings attend to the class descriptions' text features and are pooled
// into K visual prompts.
//
//	ctx   = linear(text)                       [N, Dv]   (N description rows)
//	q_in  = x_patch (+ LoRA_q)                 [B·P, Dv]
//	k_in  = ctx (+ LoRA_k); v_in = ctx (+ LoRA_v)
//	a     = MHA(LN_q(q_in), LN_k(k_in), v_in)  [B·P, Dv] (no residual)
//	y     = W2·GEGLU(W1·LN_f(a)) + a           [B·P, Dv]
//	vis   = AdaptiveAvgPool_K(y)               [B, K, Dv]
type promptFormer struct {
	Dv, E, H, F, R, K int
	N                 int // description rows
	bins              [][2]int

	// forward state
	B, P                      int
	lora                      bool
	text                      []float32 // [N, E]
	ctx                       []float32 // [N, Dv]
	kbuf, vbuf, qbuf          []float32
	kin, vin, kxa, vxa        []float32 // [N, Dv], [N, r]
	kn, kmean, krstd          []float32
	qin, qxa                  []float32 // [B·P, Dv], [B·P, r]
	xpatch                    []float32 // [B·P, Dv]
	qn, qmean, qrstd          []float32
	q, kv                     []float32 // [B·P, Dv], [N, 2Dv] (k | v projections)
	probs, att, a             []float32 // [B, H, P, N], [B·P, Dv], [B·P, Dv]
	fn, fmean, frstd, u, g, y []float32
	scratch                   []float32
	dy, du, dg, dfn, da, datt []float32
	dq, dkv, dqn, dkn, dqin   []float32
	dkin, dvin, dctx, dxa     []float32
}

func newPromptFormer(Dv, E, H, R, K, N, P int) *promptFormer {
	return &promptFormer{Dv: Dv, E: E, H: H, F: 4 * Dv, R: R, K: K, N: N, P: P, bins: poolBins(P, K)}
}

// kvForward computes the keys' and values' side, shared by every image:
// ctx = text·Wᵀ + b, the LoRA'd inputs, LN_k and the K|V projections.
//
//	text: [N, E] (normalised description features)
func (f *promptFormer) kvForward(p tensor.Named, text []float32) {
	N, Dv, E, r := f.N, f.Dv, f.E, f.R
	f.text = text
	f.ctx = nn.Grow(f.ctx, N*Dv)
	nn.LinearForward(f.ctx, text, p[ParamLinW].Data, p[ParamLinB].Data, N, E, Dv)
	f.kin, f.vin = f.ctx, f.ctx
	if f.lora {
		f.kbuf, f.vbuf = nn.Grow(f.kbuf, N*Dv), nn.Grow(f.vbuf, N*Dv)
		f.kin, f.vin = f.kbuf, f.vbuf
		f.kxa, f.vxa = nn.Grow(f.kxa, N*r), nn.Grow(f.vxa, N*r)
		loraForward(f.kin, f.kxa, f.ctx, p[ParamKA].Data, p[ParamKB].Data, N, Dv, r)
		loraForward(f.vin, f.vxa, f.ctx, p[ParamVA].Data, p[ParamVB].Data, N, Dv, r)
	}
	f.kn, f.kmean, f.krstd = nn.Grow(f.kn, N*Dv), nn.Grow(f.kmean, N), nn.Grow(f.krstd, N)
	nn.LayerNormForward(f.kn, f.kmean, f.krstd, f.kin, p[ParamNormKW].Data, p[ParamNormKB].Data, N, Dv)
	// kv[:, :Dv] = LN_k(k_in)·W_kᵀ + b_k; kv[:, Dv:] = v_in·W_vᵀ + b_v       [N, 2Dv]
	w, b := p[ParamInW].Data, p[ParamInB].Data
	f.kv = nn.Grow(f.kv, N*2*Dv)
	k, v := make([]float32, N*Dv), make([]float32, N*Dv)
	nn.LinearForward(k, f.kn, w[Dv*Dv:2*Dv*Dv], b[Dv:2*Dv], N, Dv, Dv)
	nn.LinearForward(v, f.vin, w[2*Dv*Dv:], b[2*Dv:], N, Dv, Dv)
	for i := 0; i < N; i++ {
		copy(f.kv[i*2*Dv:i*2*Dv+Dv], k[i*Dv:(i+1)*Dv])
		copy(f.kv[i*2*Dv+Dv:(i+1)*2*Dv], v[i*Dv:(i+1)*Dv])
	}
}

// forward maps the patch rows x_patch [B, P, Dv] to the visual prompts
// [B, K, Dv] (written into vis). Call kvForward first.
func (f *promptFormer) forward(vis, xpatch []float32, p tensor.Named, B int) {
	P, Dv, H, F, r, N := f.P, f.Dv, f.H, f.F, f.R, f.N
	f.B = B
	M := B * P
	f.xpatch = xpatch
	f.qin = xpatch
	if f.lora {
		f.qbuf = nn.Grow(f.qbuf, M*Dv)
		f.qin = f.qbuf
		f.qxa = nn.Grow(f.qxa, M*r)
		loraForward(f.qin, f.qxa, xpatch, p[ParamQA].Data, p[ParamQB].Data, M, Dv, r)
	}
	// q = LN_q(q_in)·W_qᵀ + b_q                                        [B·P, Dv]
	f.qn, f.qmean, f.qrstd = nn.Grow(f.qn, M*Dv), nn.Grow(f.qmean, M), nn.Grow(f.qrstd, M)
	nn.LayerNormForward(f.qn, f.qmean, f.qrstd, f.qin, p[ParamNormQW].Data, p[ParamNormQB].Data, M, Dv)
	w, b := p[ParamInW].Data, p[ParamInB].Data
	f.q = nn.Grow(f.q, M*Dv)
	nn.LinearForward(f.q, f.qn, w[:Dv*Dv], b[:Dv], M, Dv, Dv)
	// att[b] = softmax(q[b]·kᵀ/√dh)·v per head                           [B·P, Dv]
	f.probs = nn.Grow(f.probs, B*H*P*N)
	f.att = nn.Grow(f.att, M*Dv)
	sh := nn.AttentionShape{B: 1, Tq: P, Tk: N, H: H, Dh: Dv / H, QStride: Dv, KVStride: 2 * Dv}
	for i := 0; i < B; i++ {
		nn.AttentionForward(f.att[i*P*Dv:], f.probs[i*H*P*N:], f.q[i*P*Dv:], f.kv, f.kv[Dv:], sh, nn.Mask{})
	}
	// a = att·W_oᵀ + b_o                                                 [B·P, Dv]
	f.a = nn.Grow(f.a, M*Dv)
	nn.LinearForward(f.a, f.att, p[ParamOutW].Data, p[ParamOutB].Data, M, Dv, Dv)
	// y = W2·GEGLU(W1·LN_f(a) + b1) + b2 + a                              [B·P, Dv]
	f.fn, f.fmean, f.frstd = nn.Grow(f.fn, M*Dv), nn.Grow(f.fmean, M), nn.Grow(f.frstd, M)
	nn.LayerNormForward(f.fn, f.fmean, f.frstd, f.a, p[ParamNormFW].Data, p[ParamNormFB].Data, M, Dv)
	f.u = nn.Grow(f.u, M*2*F)
	nn.LinearForward(f.u, f.fn, p[ParamFF1W].Data, p[ParamFF1B].Data, M, Dv, 2*F)
	f.g = nn.Grow(f.g, M*F)
	gegluForward(f.g, f.u, M, F)
	f.y = nn.Grow(f.y, M*Dv)
	nn.LinearForward(f.y, f.g, p[ParamFF2W].Data, p[ParamFF2B].Data, M, F, Dv)
	nn.AddInto(f.y, f.a)
	// vis = AdaptiveAvgPool_K over the P rows                            [B, K, Dv]
	poolForward(vis, f.y, f.bins, B, P, Dv)
}

// backward takes dvis [B, K, Dv] and accumulates into g the gradients of
// the tensors trained in the current mode: the cross-attention block (or the
// LoRA factors) and the linear map.
func (f *promptFormer) backward(g, p tensor.Named, dvis []float32) {
	f.ffBackward(g, p, dvis)
	dk, dv := f.attnBackward(g, p)
	f.inProjBackward(g, p, dk, dv)
	f.keyNormBackward(g, p)
	f.queryInputBackward(g, p)
	f.ctxBackward(g, p)
}

// trained is g's gradient of name when the current mode trains it, nil
// when it is frozen (the cross-attention block under LoRA, the LoRA
// factors before the switch).
func (f *promptFormer) trained(g tensor.Named, name string) []float32 {
	if f.lora == (len(name) > len(crossAttnPrefix) && name[:len(crossAttnPrefix)] == crossAttnPrefix) {
		return nil // frozen in this mode
	}
	return g[name].Data
}

// ffBackward runs the pool and y = W2·GEGLU(W1·LN_f(a) + b1) + b2 + a
// backward: dvis [B, K, Dv] → f.dy [B·P, Dv] → f.da [B·P, Dv].
func (f *promptFormer) ffBackward(g, p tensor.Named, dvis []float32) {
	B, P, Dv, F := f.B, f.P, f.Dv, f.F
	M := B * P
	// pool
	f.dy = nn.Grow(f.dy, M*Dv)
	clear(f.dy)
	poolBackward(f.dy, dvis, f.bins, B, P, Dv)
	// feed-forward: y = ff(a) + a
	f.da = nn.Grow(f.da, M*Dv)
	copy(f.da, f.dy)
	f.dg = nn.Grow(f.dg, M*F)
	clear(f.dg)
	nn.LinearBackward(f.dg, f.trained(g, ParamFF2W), f.trained(g, ParamFF2B), f.dy, f.g, p[ParamFF2W].Data, M, F, Dv)
	f.du = nn.Grow(f.du, M*2*F)
	gegluBackward(f.du, f.dg, f.u, M, F)
	f.dfn = nn.Grow(f.dfn, M*Dv)
	clear(f.dfn)
	nn.LinearBackward(f.dfn, f.trained(g, ParamFF1W), f.trained(g, ParamFF1B), f.du, f.fn, p[ParamFF1W].Data, M, Dv, 2*F)
	nn.LayerNormBackward(f.da, f.trained(g, ParamNormFW), f.trained(g, ParamNormFB), f.dfn, f.a, f.fmean, f.frstd, p[ParamNormFW].Data, M, Dv)
}

// attnBackward runs a = att·W_oᵀ + b_o and the attention backward from f.da
// [B·P, Dv]: dq per image into f.dq [B·P, Dv], dk and dv summed over the
// images, returned as [N, Dv] each.
func (f *promptFormer) attnBackward(g, p tensor.Named) (dk, dv []float32) {
	B, P, Dv, H, N := f.B, f.P, f.Dv, f.H, f.N
	M := B * P
	// out projection
	f.datt = nn.Grow(f.datt, M*Dv)
	clear(f.datt)
	nn.LinearBackward(f.datt, f.trained(g, ParamOutW), f.trained(g, ParamOutB), f.da, f.att, p[ParamOutW].Data, M, Dv, Dv)
	// attention: dq per image, dk | dv summed over the images
	f.dq = nn.Grow(f.dq, M*Dv)
	clear(f.dq)
	f.dkv = nn.Grow(f.dkv, N*2*Dv)
	clear(f.dkv)
	f.scratch = nn.Grow(f.scratch, H*P*N)
	sh := nn.AttentionShape{B: 1, Tq: P, Tk: N, H: H, Dh: Dv / H, QStride: Dv, KVStride: 2 * Dv}
	for i := 0; i < B; i++ {
		nn.AttentionBackward(f.dq[i*P*Dv:], f.dkv, f.dkv[Dv:], f.datt[i*P*Dv:], f.probs[i*H*P*N:], f.q[i*P*Dv:], f.kv, f.kv[Dv:], f.scratch, sh)
	}
	dk, dv = make([]float32, N*Dv), make([]float32, N*Dv)
	for i := 0; i < N; i++ {
		copy(dk[i*Dv:(i+1)*Dv], f.dkv[i*2*Dv:i*2*Dv+Dv])
		copy(dv[i*Dv:(i+1)*Dv], f.dkv[i*2*Dv+Dv:(i+1)*2*Dv])
	}
	return dk, dv
}

// inProjBackward runs the in projection (rows q | k | v of in_proj_weight)
// backward: f.dq → f.dqn [B·P, Dv], dk → f.dkn [N, Dv], dv → f.dvin [N, Dv].
func (f *promptFormer) inProjBackward(g, p tensor.Named, dk, dv []float32) {
	Dv, N, M := f.Dv, f.N, f.B*f.P
	w := p[ParamInW].Data
	var dw, db []float32
	if gw := f.trained(g, ParamInW); gw != nil {
		dw, db = gw, f.trained(g, ParamInB)
	}
	f.dqn = nn.Grow(f.dqn, M*Dv)
	clear(f.dqn)
	nn.LinearBackward(f.dqn, nthPart(dw, 0, Dv*Dv), nthPart(db, 0, Dv), f.dq, f.qn, w[:Dv*Dv], M, Dv, Dv)
	f.dkn = nn.Grow(f.dkn, N*Dv)
	clear(f.dkn)
	nn.LinearBackward(f.dkn, nthPart(dw, 1, Dv*Dv), nthPart(db, 1, Dv), dk, f.kn, w[Dv*Dv:2*Dv*Dv], N, Dv, Dv)
	f.dvin = nn.Grow(f.dvin, N*Dv)
	clear(f.dvin)
	nn.LinearBackward(f.dvin, nthPart(dw, 2, Dv*Dv), nthPart(db, 2, Dv), dv, f.vin, w[2*Dv*Dv:], N, Dv, Dv)
}

// nthPart is s[i·n : (i+1)·n], or nil for nil s.
func nthPart(s []float32, i, n int) []float32 {
	if s == nil {
		return nil
	}
	return s[i*n : (i+1)*n]
}

// keyNormBackward runs LN_k(k_in) backward: f.dkn → f.dkin [N, Dv].
func (f *promptFormer) keyNormBackward(g, p tensor.Named) {
	Dv, N := f.Dv, f.N
	f.dkin = nn.Grow(f.dkin, N*Dv)
	clear(f.dkin)
	nn.LayerNormBackward(f.dkin, f.trained(g, ParamNormKW), f.trained(g, ParamNormKB), f.dkn, f.kin, f.kmean, f.krstd, p[ParamNormKW].Data, N, Dv)
}

// queryInputBackward runs LN_q(q_in) backward from f.dqn [B·P, Dv]: into
// LN_q's weights before the switch, through q_in = x_patch + LoRA_q into the
// query LoRA factors after it (x_patch is frozen).
func (f *promptFormer) queryInputBackward(g, p tensor.Named) {
	Dv, r, M := f.Dv, f.R, f.B*f.P
	if !f.lora {
		nn.LayerNormBackward(nil, g[ParamNormQW].Data, g[ParamNormQB].Data, f.dqn, f.qin, f.qmean, f.qrstd, p[ParamNormQW].Data, M, Dv)
		return
	}
	// the query LoRA needs the gradient at q_in; x_patch is frozen
	f.dqin = nn.Grow(f.dqin, M*Dv)
	clear(f.dqin)
	nn.LayerNormBackward(f.dqin, nil, nil, f.dqn, f.qin, f.qmean, f.qrstd, p[ParamNormQW].Data, M, Dv)
	f.dxa = nn.Grow(f.dxa, M*r)
	loraBackward(nil, g[ParamQA].Data, g[ParamQB].Data, f.dxa, f.dqin, f.xpatch, f.qxa, p[ParamQA].Data, p[ParamQB].Data, M, Dv, r)
}

// ctxBackward takes the keys' and values' input gradients f.dkin and f.dvin
// [N, Dv] (through their LoRA factors after the switch) to ctx, f.dctx
// [N, Dv], and through ctx = text·Wᵀ + b into the linear map (text is
// frozen).
func (f *promptFormer) ctxBackward(g, p tensor.Named) {
	Dv, r, N, M := f.Dv, f.R, f.N, f.B*f.P
	f.dctx = nn.Grow(f.dctx, N*Dv)
	clear(f.dctx)
	if f.lora {
		f.dxa = nn.Grow(f.dxa, max(M, N)*r)
		loraBackward(f.dctx, g[ParamKA].Data, g[ParamKB].Data, f.dxa, f.dkin, f.ctx, f.kxa, p[ParamKA].Data, p[ParamKB].Data, N, Dv, r)
		loraBackward(f.dctx, g[ParamVA].Data, g[ParamVB].Data, f.dxa, f.dvin, f.ctx, f.vxa, p[ParamVA].Data, p[ParamVB].Data, N, Dv, r)
	} else {
		nn.AddInto(f.dctx, f.dkin)
		nn.AddInto(f.dctx, f.dvin)
	}
	// ctx = text·Wᵀ + b (text is frozen)
	nn.LinearBackward(nil, g[ParamLinW].Data, g[ParamLinB].Data, f.dctx, f.text, p[ParamLinW].Data, N, f.E, Dv)
}
