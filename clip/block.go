package clip

import (
	"github.com/pfedmma/pfedmma/nn"
)

// Adapter is a branch parallel to a whole residual block, such as pFedMMA's
// multi-modal adapter: it reads the block's ln_1 output and adds its result
// to the block output. The block calls it for exactly the rows it computes
// (all tokens, or only the pooled token in a pruned last block).
type Adapter interface {
	// Forward reads h = ln_1(x) [N, D] and adds the branch output into out [N, D].
	Forward(out, h []float32, N int)
	// Backward reads dout [N, D], the gradient at the block output, and
	// accumulates the adapter's parameter gradients; when dh is not nil it
	// adds the gradient with respect to h into dh [N, D].
	Backward(dh, dout []float32, N int)
}

// QKVAdapter adds a trainable delta to the attention's projections, such
// as LoRA's scale·B·A on q, k and v. part is 0 for q, 1 for k, 2 for v.
type QKVAdapter interface {
	// Forward reads h = ln_1(x) [N, D] and adds the part's delta into the
	// D columns of each row of out (rows stride apart); train selects
	// training behaviour (dropout) and keeps what Backward needs.
	Forward(part int, out []float32, stride int, h []float32, N int, train bool)
	// Backward reads the gradient at those columns (dout, rows stride
	// apart), accumulates the part's parameter gradients and adds the
	// gradient with respect to h into dh [N, D].
	Backward(part int, dh, dout []float32, stride, N int)
}

// Block is one pre-LN residual attention block:
//
//	x' = x + out_proj(attn(ln_1(x)))
//	y  = x' + c_proj(QuickGELU(c_fc(ln_2(x')))) [+ adapter(ln_1(x))]
//
// It owns the activations its backward pass needs; they are reused between
// calls and grow only when a larger batch arrives.
type Block struct {
	W       *BlockWeights
	G       *BlockWeights // weight gradients (+=); nil when the block is frozen
	D, H    int           // width and heads
	MLP     int           // MLP hidden width
	Causal  bool          // text blocks use a causal mask
	Adapter Adapter       // optional parallel branch
	QKV     QKVAdapter    // optional trainable delta of q, k and v (LoRA)

	saved blockActs // activations kept for Backward (train mode)
	bf    blockBF16 // bfloat16 weights (SetPrecision); nil in float32 mode
}

// blockActs are the activations of one forward pass.
type blockActs struct {
	B, T  int   // batch and sequence length of the input
	pool  []int // pooled position per row when the block is pruned, else nil
	rows  int   // rows computed after attention: B·T, or B when pruned
	x     []float32
	ln1   []float32 // [B·T, D]
	mean1 []float32 // [B·T]
	rstd1 []float32
	qkv   []float32 // full: [B·T, 3D]; pruned: k|v [B·T, 2D]
	q     []float32 // pruned only: [B, D]
	ln1p  []float32 // pruned only: ln_1 rows of the pooled tokens [B, D]
	probs []float32 // [B, H, Tq, T]
	att   []float32 // [rows, D] attention output before out_proj
	x2    []float32 // [rows, D] after the attention residual
	ln2   []float32 // [rows, D]
	mean2 []float32
	rstd2 []float32
	fc    []float32 // [rows, MLP] before QuickGELU
	gelu  []float32 // [rows, MLP]
}

func (a *blockActs) resize(B, T, D, H, MLP int, pool []int) {
	a.B, a.T, a.pool = B, T, pool
	N := B * T
	tq := T
	a.rows = N
	if pool != nil {
		tq = 1
		a.rows = B
	}
	grow := nn.Grow
	a.ln1 = grow(a.ln1, N*D)
	a.mean1 = grow(a.mean1, N)
	a.rstd1 = grow(a.rstd1, N)
	if pool != nil {
		a.qkv = grow(a.qkv, N*2*D)
		a.q = grow(a.q, B*D)
		a.ln1p = grow(a.ln1p, B*D)
	} else {
		a.qkv = grow(a.qkv, N*3*D)
	}
	a.probs = grow(a.probs, B*H*tq*T)
	a.att = grow(a.att, a.rows*D)
	a.x2 = grow(a.x2, a.rows*D)
	a.ln2 = grow(a.ln2, a.rows*D)
	a.mean2 = grow(a.mean2, a.rows)
	a.rstd2 = grow(a.rstd2, a.rows)
	a.fc = grow(a.fc, a.rows*MLP)
	a.gelu = grow(a.gelu, a.rows*MLP)
}

// shape returns the attention shape and the q/k/v views of the activations.
func (b *Block) attnViews(a *blockActs) (s nn.AttentionShape, q, k, v []float32, mask nn.Mask) {
	D := b.D
	s = nn.AttentionShape{B: a.B, Tk: a.T, H: b.H, Dh: D / b.H}
	mask = nn.Mask{Causal: b.Causal}
	if a.pool != nil {
		s.Tq, s.QStride, s.KVStride = 1, D, 2*D
		mask.QPos = a.pool
		return s, a.q, a.qkv, a.qkv[D:], mask
	}
	s.Tq, s.QStride, s.KVStride = a.T, 3*D, 3*D
	return s, a.qkv, a.qkv[D:], a.qkv[2*D:], mask
}

// Forward runs the block.
//
//	x: [B, T, D] input (kept by reference for Backward when train is set)
//	pool: nil for the full block; otherwise pool[b] is the one position of
//	      row b whose output is needed (class token 0, or the EOT position),
//	      and the block is pruned: keys and values are computed for all
//	      tokens, everything else only for the pooled token
//	out: [B, T, D] for the full block, [B, D] when pruned
//
// With train unset the activations go to scratch (shared between blocks) and
// Backward cannot be called.
func (b *Block) Forward(out, x []float32, B, T int, pool []int, train bool, scratch *BlockScratch) {
	a := &b.saved
	if !train {
		a = &scratch.acts
	}
	D, MLP := b.D, b.MLP
	a.resize(B, T, D, b.H, MLP, pool)
	a.x = x
	N, w := B*T, b.W

	// h = ln_1(x)                                     [B·T, D]
	nn.LayerNormForward(a.ln1, a.mean1, a.rstd1, x, w.Ln1W, w.Ln1B, N, D)
	if pool == nil {
		// q|k|v = h · in_projᵀ + b                    [B·T, 3D]
		b.linearForward(a.qkv, a.ln1, w.InProjW, b.bf.inProj, w.InProjB, N, D, 3*D)
		if b.QKV != nil {
			for part := 0; part < 3; part++ {
				b.QKV.Forward(part, a.qkv[part*D:], 3*D, a.ln1, N, train)
			}
		}
	} else {
		// k|v for every token, q for the pooled token only
		b.linearForward(a.qkv, a.ln1, w.InProjW[D*D:], b.bf.inKV, w.InProjB[D:], N, D, 2*D)
		for r, p := range pool {
			copy(a.ln1p[r*D:r*D+D], a.ln1[(r*T+p)*D:(r*T+p)*D+D])
		}
		b.linearForward(a.q, a.ln1p, w.InProjW[:D*D], b.bf.inQ, w.InProjB[:D], B, D, D)
		if b.QKV != nil {
			b.QKV.Forward(1, a.qkv, 2*D, a.ln1, N, train)
			b.QKV.Forward(2, a.qkv[D:], 2*D, a.ln1, N, train)
			b.QKV.Forward(0, a.q, D, a.ln1p, B, train)
		}
	}
	s, q, k, v, mask := b.attnViews(a)
	nn.AttentionForward(a.att, a.probs, q, k, v, s, mask)

	// x' = x + att · out_projᵀ + b                    [rows, D]
	b.linearForward(a.x2, a.att, w.OutProjW, b.bf.outProj, w.OutProjB, a.rows, D, D)
	addResidual(a.x2, x, B, T, D, pool)

	// y = x' + c_proj(QuickGELU(c_fc(ln_2(x'))))     [rows, D]
	nn.LayerNormForward(a.ln2, a.mean2, a.rstd2, a.x2, w.Ln2W, w.Ln2B, a.rows, D)
	b.linearForward(a.fc, a.ln2, w.FcW, b.bf.fc, w.FcB, a.rows, D, MLP)
	nn.QuickGELUForward(a.gelu, a.fc, a.rows*MLP)
	b.linearForward(out[:a.rows*D], a.gelu, w.ProjW, b.bf.proj, w.ProjB, a.rows, MLP, D)
	nn.AddInto(out[:a.rows*D], a.x2[:a.rows*D])

	// y += adapter(ln_1(x))
	if b.Adapter != nil {
		h := a.ln1
		if pool != nil {
			h = a.ln1p
		}
		b.Adapter.Forward(out[:a.rows*D], h[:a.rows*D], a.rows)
	}
}

// addResidual adds the block input x [B, T, D] into dst: every row for the
// full block, only the pooled rows (dst [B, D]) when pruned.
func addResidual(dst, x []float32, B, T, D int, pool []int) {
	if pool == nil {
		nn.AddInto(dst[:B*T*D], x[:B*T*D])
		return
	}
	for r, p := range pool {
		nn.AddInto(dst[r*D:r*D+D], x[(r*T+p)*D:(r*T+p)*D+D])
	}
}

// BlockScratch holds buffers shared by the blocks of one encoder: the
// activations of inference-only passes and the gradients of backward passes.
type BlockScratch struct {
	acts  blockActs
	dx2   []float32
	dgelu []float32
	dfc   []float32
	dln2  []float32
	datt  []float32
	dqkv  []float32
	dq    []float32
	dln1  []float32
	dln1p []float32
	dprob []float32 // attention score gradients [B, H, Tq, T]
}

// Backward accumulates the gradients of the last train-mode Forward.
//
//	dout: [B, T, D] (or [B, D] when the forward pass was pruned)
//	dx:   [B, T, D] gradient with respect to the block input (+=); nil when
//	      nothing below the block needs it — then only the adapter's (and,
//	      when G is set, the block's own) parameter gradients are computed
func (b *Block) Backward(dx, dout []float32, scratch *BlockScratch) {
	a := &b.saved
	if dx == nil && b.G == nil && b.QKV == nil {
		// The frozen path needs no backward at all: only the adapter learns.
		if b.Adapter != nil {
			b.Adapter.Backward(nil, dout[:a.rows*b.D], a.rows)
		}
		return
	}
	sc := scratch
	var gw blockGradViews
	if b.G != nil {
		gw = blockGradViews{b.G}
	}
	// residual: dx' = dout                            [rows, D]
	sc.dx2 = nn.Grow(sc.dx2, a.rows*b.D)
	copy(sc.dx2, dout[:a.rows*b.D])
	b.mlpBackward(sc, gw, dout)
	b.attentionBackward(sc, gw, dout)
	b.ln1Backward(dx, sc, gw)
}

// mlpBackward runs y = x' + c_proj(QuickGELU(c_fc(ln_2(x')))) backward:
// from dout [rows, D] it accumulates the MLP's and ln_2's weight gradients
// and adds the gradient through ln_2 into sc.dx2 [rows, D].
func (b *Block) mlpBackward(sc *BlockScratch, gw blockGradViews, dout []float32) {
	a, w := &b.saved, b.W
	D, MLP, rows := b.D, b.MLP, b.saved.rows
	sc.dgelu = nn.Grow(sc.dgelu, rows*MLP)
	b.inputGrad(sc.dgelu, gw.projW(), gw.projB(), dout, a.gelu, w.ProjW, b.bf.proj, rows, MLP, D)
	sc.dfc = nn.Grow(sc.dfc, rows*MLP)
	clear(sc.dfc)
	nn.QuickGELUBackward(sc.dfc, sc.dgelu, a.fc, rows*MLP)
	sc.dln2 = nn.Grow(sc.dln2, rows*D)
	b.inputGrad(sc.dln2, gw.fcW(), gw.fcB(), sc.dfc, a.ln2, w.FcW, b.bf.fc, rows, D, MLP)
	nn.LayerNormBackward(sc.dx2, gw.ln2W(), gw.ln2B(), sc.dln2, a.x2, a.mean2, a.rstd2, w.Ln2W, rows, D)
}

// attentionBackward runs x' = x + att · out_projᵀ backward from sc.dx2
// [rows, D] down to sc.dln1 [B·T, D], the gradient of ln_1(x), adding the
// adapter's share (whose output gradient is dout).
func (b *Block) attentionBackward(sc *BlockScratch, gw blockGradViews, dout []float32) {
	a := &b.saved
	D, N := b.D, a.B*a.T
	sc.datt = nn.Grow(sc.datt, a.rows*D)
	b.inputGrad(sc.datt, gw.outW(), gw.outB(), sc.dx2, a.att, b.W.OutProjW, b.bf.outProj, a.rows, D, D)
	s, q, k, v, _ := b.attnViews(a)
	sc.dprob = nn.Grow(sc.dprob, a.B*b.H*s.Tq*a.T)
	sc.dln1 = nn.Grow(sc.dln1, N*D)
	if a.pool == nil {
		b.qkvBackward(sc, gw, dout, s, q, k, v)
		return
	}
	b.pooledQKVBackward(sc, gw, dout, s, q, k, v)
}

// qkvBackward is the full block's attention and q|k|v = h · in_projᵀ + b
// backward: sc.datt [B·T, D] → sc.dqkv [B·T, 3D] → sc.dln1 [B·T, D].
func (b *Block) qkvBackward(sc *BlockScratch, gw blockGradViews, dout []float32, s nn.AttentionShape, q, k, v []float32) {
	a := &b.saved
	D, N := b.D, a.B*a.T
	sc.dqkv = nn.Grow(sc.dqkv, N*3*D)
	clear(sc.dqkv)
	nn.AttentionBackward(sc.dqkv, sc.dqkv[D:], sc.dqkv[2*D:], sc.datt, a.probs, q, k, v, sc.dprob, s)
	b.inputGrad(sc.dln1, gw.inW(0, 3*D, D), gw.inB(0, 3*D), sc.dqkv, a.ln1, b.W.InProjW, b.bf.inProj, N, D, 3*D)
	if b.QKV != nil {
		for part := 0; part < 3; part++ {
			b.QKV.Backward(part, sc.dln1, sc.dqkv[part*D:], 3*D, N)
		}
	}
	if b.Adapter != nil {
		b.Adapter.Backward(sc.dln1, dout[:a.rows*D], a.rows)
	}
}

// pooledQKVBackward is the pruned block's attention backward: k|v for every
// token (sc.dqkv [B·T, 2D]), q for the pooled token only (sc.dq [B, D]);
// the pooled rows' ln_1 gradient sc.dln1p [B, D] is added into sc.dln1
// [B·T, D] at the pooled positions.
func (b *Block) pooledQKVBackward(sc *BlockScratch, gw blockGradViews, dout []float32, s nn.AttentionShape, q, k, v []float32) {
	a, w := &b.saved, b.W
	B, D, N := a.B, b.D, a.B*a.T
	sc.dqkv = nn.Grow(sc.dqkv, N*2*D)
	clear(sc.dqkv)
	sc.dq = nn.Grow(sc.dq, B*D)
	clear(sc.dq)
	nn.AttentionBackward(sc.dq, sc.dqkv, sc.dqkv[D:], sc.datt, a.probs, q, k, v, sc.dprob, s)
	b.inputGrad(sc.dln1, gw.inW(D, 3*D, D), gw.inB(D, 3*D), sc.dqkv, a.ln1, w.InProjW[D*D:], b.bf.inKV, N, D, 2*D)
	sc.dln1p = nn.Grow(sc.dln1p, B*D)
	b.inputGrad(sc.dln1p, gw.inW(0, D, D), gw.inB(0, D), sc.dq, a.ln1p, w.InProjW[:D*D], b.bf.inQ, B, D, D)
	if b.QKV != nil {
		b.QKV.Backward(1, sc.dln1, sc.dqkv, 2*D, N)
		b.QKV.Backward(2, sc.dln1, sc.dqkv[D:], 2*D, N)
		b.QKV.Backward(0, sc.dln1p, sc.dq, D, B)
	}
	if b.Adapter != nil {
		b.Adapter.Backward(sc.dln1p, dout[:a.rows*D], a.rows)
	}
	addPooled(sc.dln1, sc.dln1p, a.T, D, a.pool)
}

// ln1Backward runs h = ln_1(x) backward from sc.dln1 [B·T, D] into dx
// [B·T, D] (+=) and adds the residual sc.dx2; with dx nil only ln_1's
// weight gradients are taken (when the block learns).
func (b *Block) ln1Backward(dx []float32, sc *BlockScratch, gw blockGradViews) {
	a, w := &b.saved, b.W
	D, N := b.D, a.B*a.T
	if dx == nil {
		// Only weight gradients were asked for; ln_1's weights still need theirs.
		if g := b.G; g != nil {
			nn.LayerNormBackward(nil, g.Ln1W, g.Ln1B, sc.dln1, a.x, a.mean1, a.rstd1, w.Ln1W, N, D)
		}
		return
	}
	nn.LayerNormBackward(dx, gw.ln1W(), gw.ln1B(), sc.dln1, a.x, a.mean1, a.rstd1, w.Ln1W, N, D)
	// residual into the block input
	if a.pool == nil {
		nn.AddInto(dx[:N*D], sc.dx2[:N*D])
		return
	}
	addPooled(dx, sc.dx2, a.T, D, a.pool)
}

// addPooled adds src [B, D] into dst [B, T, D] at each row's pooled
// position pool[r], one value at a time.
func addPooled(dst, src []float32, T, D int, pool []int) {
	for r, p := range pool {
		row := dst[(r*T+p)*D : (r*T+p)*D+D]
		for j, v := range src[r*D : r*D+D] {
			row[j] += v
		}
	}
}

// blockGradViews returns nil gradient slices when the block is frozen, so
// the layer backward functions skip weight gradients.
type blockGradViews struct{ g *BlockWeights }

func (v blockGradViews) projW() []float32 {
	return v.sel(func(g *BlockWeights) []float32 { return g.ProjW })
}
func (v blockGradViews) projB() []float32 {
	return v.sel(func(g *BlockWeights) []float32 { return g.ProjB })
}
func (v blockGradViews) fcW() []float32 {
	return v.sel(func(g *BlockWeights) []float32 { return g.FcW })
}
func (v blockGradViews) fcB() []float32 {
	return v.sel(func(g *BlockWeights) []float32 { return g.FcB })
}
func (v blockGradViews) ln2W() []float32 {
	return v.sel(func(g *BlockWeights) []float32 { return g.Ln2W })
}
func (v blockGradViews) ln2B() []float32 {
	return v.sel(func(g *BlockWeights) []float32 { return g.Ln2B })
}
func (v blockGradViews) ln1W() []float32 {
	return v.sel(func(g *BlockWeights) []float32 { return g.Ln1W })
}
func (v blockGradViews) ln1B() []float32 {
	return v.sel(func(g *BlockWeights) []float32 { return g.Ln1B })
}
func (v blockGradViews) outW() []float32 {
	return v.sel(func(g *BlockWeights) []float32 { return g.OutProjW })
}
func (v blockGradViews) outB() []float32 {
	return v.sel(func(g *BlockWeights) []float32 { return g.OutProjB })
}

// inW is the gradient view of in_proj rows [lo, hi) (each row D wide).
func (v blockGradViews) inW(lo, hi, D int) []float32 {
	return v.sel(func(g *BlockWeights) []float32 { return g.InProjW[lo*D : hi*D] })
}
func (v blockGradViews) inB(lo, hi int) []float32 {
	return v.sel(func(g *BlockWeights) []float32 { return g.InProjB[lo:hi] })
}
func (v blockGradViews) sel(f func(*BlockWeights) []float32) []float32 {
	if v.g == nil {
		return nil
	}
	return f(v.g)
}
