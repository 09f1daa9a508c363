package clip

import (
	"github.com/pfedmma/pfedmma/gemm"
	"github.com/pfedmma/pfedmma/nn"
)

// Vision is the ViT image encoder with its run-time buffers.
//
//	pixels [B, 3, S, S] → patchify conv (no bias) → [B, G², D]
//	→ prepend class embedding, + positional embedding → ln_pre → x0 [B, T, D]
//	→ blocks → ln_post(class token) → @ proj → features [B, E]
type Vision struct {
	Cfg   VisionConfig
	W     *VisionWeights
	G     *VisionWeights // gradients of the embedding and head (+=); nil when frozen
	Stack Stack
	// EmbedAdapter, when set, is pFedMMA's index-0 adapter:
	// x0 = ln_pre(x) + A(ln_pre(x)).
	EmbedAdapter Adapter

	patches, emb, pre, mean0, rstd0, x0 []float32
	demb, dpatch, adapted               []float32
	adaptB, embB                        int
	head                                projHead // ln_post, proj
}

// EmbedForward turns normalised pixels [B, 3, S, S] into the input of the
// first block x0 = ln_pre(…) [B, T, D] (owned by the encoder, valid until the
// next call). The index-0 adapter, if any, is applied by AdaptEmbed.
func (v *Vision) EmbedForward(pixels []float32, B int) []float32 {
	c, w := v.Cfg, v.W
	D, P, G, S := c.Width, c.PatchSize, c.Grid(), c.ImageSize
	T, K := c.Tokens(), 3*P*P
	v.embB = B
	// im2col: patches[b, gy·G+gx, (ch, ky, kx)]       [B·G², 3·P·P]
	v.patches = growF(v.patches, B*G*G*K)
	nn.ParallelFor(B*G, 1, func(lo, hi int) {
		for bg := lo; bg < hi; bg++ {
			b, gy := bg/G, bg%G
			for gx := 0; gx < G; gx++ {
				dst := v.patches[((b*G+gy)*G+gx)*K:]
				for ch := 0; ch < 3; ch++ {
					for ky := 0; ky < P; ky++ {
						src := pixels[((b*3+ch)*S+gy*P+ky)*S+gx*P:]
						copy(dst[(ch*P+ky)*P:(ch*P+ky)*P+P], src[:P])
					}
				}
			}
		}
	})
	// emb = patches · conv1ᵀ                           [B·G², D]
	v.emb = growF(v.emb, B*G*G*D)
	gemm.MatMul(false, true, B*G*G, D, K, v.patches, w.Conv1W, v.emb, false)
	// x = [class | emb] + pos                          [B, T, D]
	v.pre = growF(v.pre, B*T*D)
	for b := 0; b < B; b++ {
		row := v.pre[b*T*D:]
		for j := 0; j < D; j++ {
			row[j] = w.ClassEmb[j] + w.PosEmb[j]
		}
		for t := 1; t < T; t++ {
			e := v.emb[(b*G*G+t-1)*D:]
			r, p := row[t*D:t*D+D], w.PosEmb[t*D:]
			for j := range r {
				r[j] = e[j] + p[j]
			}
		}
	}
	// x0 = ln_pre(x)
	v.mean0, v.rstd0 = growF(v.mean0, B*T), growF(v.rstd0, B*T)
	v.x0 = growF(v.x0, B*T*D)
	nn.LayerNormForward(v.x0, v.mean0, v.rstd0, v.pre, w.LnPreW, w.LnPreB, B*T, D)
	return v.x0
}

// EmbedInput returns ln_pre's input of the last EmbedForward, x = [class |
// patches·conv1ᵀ] + pos [B, T, D] (owned by the encoder, valid until the next
// call): FedMVP's cross-attention reads the patch rows before ln_pre.
func (v *Vision) EmbedInput() []float32 { return v.pre[:v.embB*v.Cfg.Tokens()*v.Cfg.Width] }

// AdaptEmbed applies the index-0 adapter: x0' = h + A(h) for h = x0 [B, T, D]
// (returns h itself when there is no embedding adapter).
func (v *Vision) AdaptEmbed(h []float32, B int) []float32 {
	if v.EmbedAdapter == nil {
		return h
	}
	n := B * v.Cfg.Tokens() * v.Cfg.Width
	v.adapted = growF(v.adapted, n)
	copy(v.adapted, h[:n])
	v.EmbedAdapter.Forward(v.adapted, h[:n], B*v.Cfg.Tokens())
	v.adaptB = B
	return v.adapted
}

// AdaptEmbedBackward accumulates the index-0 adapter's parameter gradients
// from dx0 [B, T, D], the gradient at its output. When dh is not nil it
// receives (+=) the gradient with respect to the adapter's input h.
func (v *Vision) AdaptEmbedBackward(dh, dx0 []float32) {
	if v.EmbedAdapter == nil {
		return
	}
	n := v.adaptB * v.Cfg.Tokens() * v.Cfg.Width
	if dh != nil {
		for i, g := range dx0[:n] {
			dh[i] += g
		}
	}
	v.EmbedAdapter.Backward(dh, dx0[:n], v.adaptB*v.Cfg.Tokens())
}

// EmbedBackward accumulates the gradients of the embedding (class and
// positional embeddings, conv1 and ln_pre) from dx0 [B, T, D], the gradient
// with respect to EmbedForward's output. It needs G; pixels get no gradient.
func (v *Vision) EmbedBackward(dx0 []float32) {
	c, w := v.Cfg, v.W
	B, D, P, G := v.embB, c.Width, c.PatchSize, c.Grid()
	T, K := c.Tokens(), 3*P*P
	if v.G == nil {
		return
	}
	g := v.G
	dln := dx0
	v.demb = growF(v.demb, B*T*D)
	clear(v.demb)
	nn.LayerNormBackward(v.demb, g.LnPreW, g.LnPreB, dln, v.pre, v.mean0, v.rstd0, w.LnPreW, B*T, D)
	v.dpatch = growF(v.dpatch, B*G*G*D)
	dpatch := v.dpatch
	for b := 0; b < B; b++ {
		row := v.demb[b*T*D:]
		for j := 0; j < D; j++ {
			g.ClassEmb[j] += row[j]
		}
		for i, x := range row[:T*D] {
			g.PosEmb[i] += x
		}
		copy(dpatch[b*(T-1)*D:(b+1)*(T-1)*D], row[D:T*D])
	}
	// dconv1 += dpatchᵀ · patches                      [D, 3·P·P]
	gemm.MatMul(true, false, D, K, B*G*G, dpatch, v.patches, g.Conv1W, true)
}

// HeadForward maps the class-token output of the last block, pooled [B, D],
// to image features [B, E] = ln_post(pooled) @ proj (written into feat).
func (v *Vision) HeadForward(feat, pooled []float32, B int) {
	v.head.forward(feat, pooled, B, v.Cfg.Width, v.W.LnPostW, v.W.LnPostB, v.W.Proj)
}

// HeadBackward takes dfeat [B, E] and returns the gradient with respect to
// the pooled class token [B, D] (owned by the encoder).
func (v *Vision) HeadBackward(dfeat []float32) []float32 {
	var dProj, dLnW, dLnB []float32
	if v.G != nil {
		dProj, dLnW, dLnB = v.G.Proj, v.G.LnPostW, v.G.LnPostB
	}
	return v.head.backward(dfeat, v.W.LnPostW, v.W.Proj, dLnW, dLnB, dProj)
}

// ClassPool returns the pooled positions of the image encoder: the class
// token (position 0) of every row.
func ClassPool(B int) []int { return make([]int, B) }

// Encode runs the whole image encoder on pixels [B, 3, S, S] and writes the
// features [B, E] into feat (inference; the last block is pruned to the class
// token, which gives the same result as the full block).
func (v *Vision) Encode(feat, pixels []float32, B int) {
	x0 := v.AdaptEmbed(v.EmbedForward(pixels, B), B)
	pooled := v.Stack.Forward(x0, B, v.Cfg.Tokens(), 0, len(v.Stack.Blocks), ClassPool(B), false)
	v.HeadForward(feat, pooled, B)
}
