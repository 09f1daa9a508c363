package clip

import (
	"fmt"

	"github.com/pfedmma/pfedmma/nn"
)

// PromptedVision runs the image encoder with n learned prompt tokens
// inserted after [cls] (shallow visual prompt tuning, as in ADAPT):
//
//	x0     = ln_pre(embeddings)                    [B, T, D]   (the cached prefix before block 1)
//	x      = [x0[cls], p_1 … p_n, x0[patches]]     [B, T+n, D] (no positional embedding on the prompts)
//	x_L    = blocks 1..L−1 (x)                     [B, T+n, D]
//	feat   = ln_post(block L (x_L)[cls]) @ proj    [B, E]
//
// and, for ADAPT's domain weighting, the query of [cls] and the keys of the
// prompt tokens in the last block, computed with its frozen ln_1 and in_proj:
//
//	h      = ln_1(x_L[0..n])                       [B, 1+n, D]
//	q      = h[cls] · W_qᵀ + b_q                   [B, D]
//	k_i    = h[p_i] · W_kᵀ + b_k                   [B, n, D]
//
// Backward returns the exact gradient with respect to the prompt tokens from
// gradients at feat, q and k. The weights are shared with the model and never
// written: the blocks are private copies without gradient buffers, so the
// backward pass runs only the input-gradient GEMMs, and the activations of a
// train-mode Forward are the PromptedVision's own (other users of the model
// do not disturb them). The frozen products (the blocks' and the q|k of the
// last block), forward and input gradient, run in the precision the model
// had when NewPromptedVision was called (Model.SetPrecision): bfloat16 with
// float32 accumulation under gemm.BF16; the prompts' gradient, LayerNorms,
// attention and the head stay float32. It is not safe for concurrent use.
type PromptedVision struct {
	N int // prompt tokens

	vis        Vision // shared weights, own head buffers
	body, last Stack  // blocks [0, L−1) and block L−1
	B, T, D, E int    // batch, tokens including the prompts, width, feature dim

	x, xl          []float32 // [B, T, D] first block input; last block input (owned by body)
	rows           []float32 // [B·(1+n), D] x_L rows of [cls] and the prompts
	h, mean, rstd  []float32 // ln_1 of rows
	qk             []float32 // [B·(1+n), 2D] q|k of rows
	q, k           []float32 // [B, D], [B, n, D]
	feat           []float32 // [B, E]
	dxl, dx, dqk   []float32
	dh, drows, dpr []float32
}

// NewPromptedVision prepares the image encoder of m for n ≥ 1 prompt tokens.
func NewPromptedVision(m *Model, n int) (*PromptedVision, error) {
	if n < 1 {
		return nil, fmt.Errorf("clip: %d visual prompt tokens: want at least 1", n)
	}
	blocks := m.Vision.Stack.Blocks
	if len(blocks) == 0 {
		return nil, fmt.Errorf("clip: the image encoder has no blocks")
	}
	p := &PromptedVision{N: n, vis: Vision{Cfg: m.Vision.Cfg, W: m.Vision.W}, D: m.Vision.Cfg.Width, E: m.W.Config.EmbedDim}
	for i, b := range blocks {
		c := b.frozenCopy() // the model's precision, no activations shared
		if i < len(blocks)-1 {
			p.body.Blocks = append(p.body.Blocks, c)
		} else {
			p.last.Blocks = []*Block{c}
		}
	}
	return p, nil
}

// Forward runs the encoder on B cached prefixes x0 [B, T0, D] (ln_pre
// output, T0 = the model's tokens) with prompts [n, D]. It returns the image
// features [B, E], the [cls] queries [B, D] and the prompt keys [B, n, D]
// of the last block (all owned by p, valid until the next Forward). With
// train set the activations are kept for Backward.
func (p *PromptedVision) Forward(x0, prompts []float32, B int, train bool) (feat, q, k []float32, err error) {
	D, n := p.D, p.N
	T0 := p.vis.Cfg.Tokens()
	if len(x0) < B*T0*D {
		return nil, nil, nil, fmt.Errorf("clip: prompted vision: prefix has %d values, want %d × %d × %d", len(x0), B, T0, D)
	}
	if len(prompts) != n*D {
		return nil, nil, nil, fmt.Errorf("clip: prompted vision: prompts have %d values, want %d × %d", len(prompts), n, D)
	}
	T := T0 + n
	p.B, p.T = B, T
	// x[b] = [x0[b, 0], prompts, x0[b, 1:]]             [B, T, D]
	p.x = nn.Grow(p.x, B*T*D)
	for b := 0; b < B; b++ {
		dst, src := p.x[b*T*D:(b+1)*T*D], x0[b*T0*D:(b+1)*T0*D]
		copy(dst[:D], src[:D])
		copy(dst[D:(1+n)*D], prompts)
		copy(dst[(1+n)*D:], src[D:])
	}
	L := len(p.body.Blocks)
	p.xl = p.body.Forward(p.x, B, T, 0, L, nil, train)

	// q|k of the [cls] and prompt rows of the last block's input
	R := B * (1 + n)
	last := p.last.Blocks[0]
	p.rows = nn.Grow(p.rows, R*D)
	for b := 0; b < B; b++ {
		copy(p.rows[b*(1+n)*D:(b+1)*(1+n)*D], p.xl[b*T*D:b*T*D+(1+n)*D])
	}
	p.h, p.mean, p.rstd = nn.Grow(p.h, R*D), nn.Grow(p.mean, R), nn.Grow(p.rstd, R)
	nn.LayerNormForward(p.h, p.mean, p.rstd, p.rows, last.W.Ln1W, last.W.Ln1B, R, D)
	p.qk = nn.Grow(p.qk, R*2*D)
	last.linearForward(p.qk, p.h, last.W.InProjW[:2*D*D], last.inProjRows(0, 2*D), last.W.InProjB[:2*D], R, D, 2*D)
	p.q, p.k = nn.Grow(p.q, B*D), nn.Grow(p.k, B*n*D)
	for b := 0; b < B; b++ {
		r := p.qk[b*(1+n)*2*D:]
		copy(p.q[b*D:(b+1)*D], r[:D])
		for i := 0; i < n; i++ {
			copy(p.k[(b*n+i)*D:(b*n+i+1)*D], r[(1+i)*2*D+D:(2+i)*2*D])
		}
	}

	pooled := p.last.Forward(p.xl, B, T, 0, 1, ClassPool(B), train)
	p.feat = nn.Grow(p.feat, B*p.E)
	p.vis.HeadForward(p.feat, pooled, B)
	return p.feat, p.q, p.k, nil
}

// Backward takes the gradients at the outputs of the last train-mode
// Forward — dfeat [B, E], dq [B, D] and dk [B, n, D]; dq and dk may be nil —
// and returns the gradient with respect to the prompts, [n, D] (owned by p,
// overwritten by each call; summed over the batch).
func (p *PromptedVision) Backward(dfeat, dq, dk []float32) []float32 {
	B, T, D, n := p.B, p.T, p.D, p.N
	dpool := p.vis.HeadBackward(dfeat)
	p.dxl = nn.Grow(p.dxl, B*T*D)
	clear(p.dxl)
	p.last.Backward(p.dxl, dpool)
	if dq != nil || dk != nil {
		R := B * (1 + n)
		last := p.last.Blocks[0]
		p.dqk = nn.Grow(p.dqk, R*2*D)
		clear(p.dqk)
		for b := 0; b < B; b++ {
			r := p.dqk[b*(1+n)*2*D:]
			if dq != nil {
				copy(r[:D], dq[b*D:(b+1)*D])
			}
			if dk != nil {
				for i := 0; i < n; i++ {
					copy(r[(1+i)*2*D+D:(2+i)*2*D], dk[(b*n+i)*D:(b*n+i+1)*D])
				}
			}
		}
		p.dh = nn.Grow(p.dh, R*D)
		clear(p.dh)
		last.linearBackward(p.dh, nil, nil, p.dqk, p.h, last.W.InProjW[:2*D*D], last.inProjRows(0, 2*D), R, D, 2*D)
		p.drows = nn.Grow(p.drows, R*D)
		clear(p.drows)
		nn.LayerNormBackward(p.drows, nil, nil, p.dh, p.rows, p.mean, p.rstd, last.W.Ln1W, R, D)
		for b := 0; b < B; b++ {
			dst := p.dxl[b*T*D : b*T*D+(1+n)*D]
			for j, v := range p.drows[b*(1+n)*D : (b+1)*(1+n)*D] {
				dst[j] += v
			}
		}
	}
	p.dx = nn.Grow(p.dx, B*T*D)
	clear(p.dx)
	p.body.Backward(p.dx, p.dxl)
	p.dpr = nn.Grow(p.dpr, n*D)
	clear(p.dpr)
	for b := 0; b < B; b++ {
		for j, v := range p.dx[b*T*D+D : b*T*D+(1+n)*D] {
			p.dpr[j] += v
		}
	}
	return p.dpr
}
