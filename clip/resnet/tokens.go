package resnet

import (
	"math"

	"github.com/pfedmma/pfedmma/nn"
)

// The every-token attention pool of PLOT's modified CLIP (github
// CHENGY12/PLOT, plot-coop/clip/model.py, AttentionPool2d; FedOTP's copy is
// the same): every one of the HW+1 tokens is a query, not only the mean
// token, and the module returns the c_proj output of all of them,
// [HW+1, B, EmbedDim]. Token 0's output is CLIP's pooled image feature
// (AttnPool); tokens 1..HW are the image's local features. Inference only:
// the methods that use it (PLOT, FedOTP) keep the image encoder frozen.

// tokenBufs are AttnPoolTokens' scratch buffers.
type tokenBufs struct {
	tok, q, k, v, att []float32
	scores            []float64
}

// Tokens is the number of token outputs per image of EncodeTokens: the
// attention pool's grid positions plus the mean token, (ImageSize/32)² + 1.
func (e *Encoder) Tokens() int {
	g := e.Cfg.ImageSize / 32
	return g*g + 1
}

// EncodeTokens writes the attention pool's output at every token of pixels
// [B, 3, S, S] (normalised) into out [B, Tokens(), EmbedDim], image-major:
// token 0 the mean token (the pooled image feature), tokens 1..HW the
// spatial positions in row-major order.
func (e *Encoder) EncodeTokens(out, pixels []float32, B int) {
	x, C, H, W := e.Stages(pixels, B, nil)
	e.AttnPoolTokens(out, x, B, C, H, W)
}

// AttnPoolTokens is PLOT's attention pool of x [B, C, H, W] (layer4's
// output) into out [B, HW+1, EmbedDim]:
//
//	tok  = [mean_p x_p; x_1 … x_HW] + pos          [B, T, C], T = HW+1
//	q, k, v = tok·Wqᵀ + bq, tok·Wkᵀ + bk, tok·Wvᵀ + bv   [B, T, C]
//	att  = per head h: softmax(q_h·k_hᵀ/√dh)·v_h    [B, T, C]
//	out  = att·c_projᵀ + c_proj.bias                [B, T, EmbedDim]
func (e *Encoder) AttnPoolTokens(out, x []float32, B, C, H, W int) {
	T := H*W + 1
	n := B * T * C
	k := &e.tk
	k.tok = nn.Grow(k.tok, n)
	poolTokens(k.tok, x, e.pos, B, C, H, W)
	k.q, k.k, k.v = nn.Grow(k.q, n), nn.Grow(k.k, n), nn.Grow(k.v, n)
	nn.LinearForward(k.q, k.tok, e.qW, e.qB, B*T, C, C)
	nn.LinearForward(k.k, k.tok, e.kW, e.kB, B*T, C, C)
	nn.LinearForward(k.v, k.tok, e.vW, e.vB, B*T, C, C)
	k.att = nn.Grow(k.att, n)
	for b := 0; b < B; b++ {
		s := b * T * C
		k.scores = selfAttention(k.att[s:s+T*C], k.q[s:s+T*C], k.k[s:s+T*C], k.v[s:s+T*C], T, C, e.Cfg.Heads, k.scores)
	}
	nn.LinearForward(out, k.att, e.cW, e.cB, B*T, C, e.Cfg.EmbedDim)
}

// selfAttention is multi-head attention of one image's T tokens on
// themselves (no mask): q, k, v [T, C] in heads of dh = C/heads channels,
// att [T, C] with att[t, h] = Σ_u softmax_u(q[t,h]·k[u,h]/√dh) · v[u,h].
// The scores and sums are float64, as AttnPool's; scores is scratch [T]
// (grown and returned).
func selfAttention(att, q, k, v []float32, T, C, heads int, scores []float64) []float64 {
	dh := C / heads
	scale := 1 / math.Sqrt(float64(dh))
	if cap(scores) < T {
		scores = make([]float64, T)
	}
	scores = scores[:T]
	for h := 0; h < heads; h++ {
		lo := h * dh
		for t := 0; t < T; t++ {
			qt := q[t*C+lo : t*C+lo+dh]
			mx := math.Inf(-1)
			for u := 0; u < T; u++ {
				ku := k[u*C+lo : u*C+lo+dh]
				var s float64
				for i := range qt {
					s += float64(qt[i]) * float64(ku[i])
				}
				scores[u] = s * scale
				mx = math.Max(mx, scores[u])
			}
			var z float64
			for u := range scores {
				scores[u] = math.Exp(scores[u] - mx)
				z += scores[u]
			}
			dst := att[t*C+lo : t*C+lo+dh]
			for i := range dst {
				var s float64
				for u := 0; u < T; u++ {
					s += scores[u] * float64(v[u*C+lo+i])
				}
				dst[i] = float32(s / z)
			}
		}
	}
	return scores
}
