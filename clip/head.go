package clip

import (
	"math"

	"github.com/pfedmma/pfedmma/nn"
)

// projHead is the shared end of both encoders: features = ln(pooled) @ proj
// (ln_post and proj for images, ln_final and text_projection for text). It
// keeps what its backward pass needs, in reused buffers.
type projHead struct {
	in, ln, mean, rstd, dln, dpool []float32
	B, D, E                        int
}

// forward writes feat [B, E] = layernorm(pooled [B, D]; lnW, lnB) @ proj [D, E].
func (h *projHead) forward(feat, pooled []float32, B, D int, lnW, lnB, proj []float32) {
	h.B, h.D, h.E, h.in = B, D, len(proj)/D, pooled
	h.ln = growF(h.ln, B*D)
	h.mean, h.rstd = growF(h.mean, B), growF(h.rstd, B)
	nn.LayerNormForward(h.ln, h.mean, h.rstd, pooled, lnW, lnB, B, D)
	nn.MatMulForward(feat, h.ln, proj, B, D, h.E)
}

// backward takes dfeat [B, E] and returns the gradient with respect to the
// pooled input [B, D] (owned by h); dLnW, dLnB and dProj receive (+=) the
// weight gradients when not nil.
func (h *projHead) backward(dfeat, lnW, proj, dLnW, dLnB, dProj []float32) []float32 {
	B, D := h.B, h.D
	h.dln = growF(h.dln, B*D)
	clear(h.dln)
	nn.MatMulBackward(h.dln, dProj, dfeat, h.ln, proj, B, D, h.E)
	h.dpool = growF(h.dpool, B*D)
	clear(h.dpool)
	nn.LayerNormBackward(h.dpool, dLnW, dLnB, h.dln, h.in, h.mean, h.rstd, lnW, B, D)
	return h.dpool
}

// CosineLogits is CLIP's classifier head on raw features:
//
//	logits[i, j] = exp(logitScale) · cos(img_i, txt_j)
//
// Forward keeps the normalised features and norms that Backward needs; the
// buffers are reused between calls.
type CosineLogits struct {
	ni, nt, normI, normT, logits []float32
	dni, dnt                     []float32
	nI, nT, E                    int
	s                            float32
}

// Forward returns logits [nI, nT] (owned by c) for raw features img [nI, E]
// and txt [nT, E].
func (c *CosineLogits) Forward(img, txt []float32, nI, nT, E int, logitScale float32) []float32 {
	c.nI, c.nT, c.E = nI, nT, E
	c.s = float32(math.Exp(float64(logitScale)))
	c.ni = append(c.ni[:0], img[:nI*E]...)
	c.nt = append(c.nt[:0], txt[:nT*E]...)
	c.normI = NormalizeRows(c.normI, c.ni, nI, E)
	c.normT = NormalizeRows(c.normT, c.nt, nT, E)
	c.logits = growF(c.logits, nI*nT)
	for i := 0; i < nI; i++ {
		a := c.ni[i*E : i*E+E]
		for j := 0; j < nT; j++ {
			b := c.nt[j*E : j*E+E]
			var dot float32
			for k := range a {
				dot += a[k] * b[k]
			}
			c.logits[i*nT+j] = c.s * dot
		}
	}
	return c.logits
}

// Backward takes dlogits [nI, nT] and writes the gradients with respect to
// the raw features into dImg [nI, E] and dTxt [nT, E] (overwritten). It
// returns the gradient with respect to logitScale.
func (c *CosineLogits) Backward(dlogits, dImg, dTxt []float32) float64 {
	nI, nT, E := c.nI, c.nT, c.E
	c.dni, c.dnt = growF(c.dni, nI*E), growF(c.dnt, nT*E)
	clear(c.dni)
	clear(c.dnt)
	var dScale float64
	// dî_i = s Σ_j dl_ij t̂_j ; dt̂_j = s Σ_i dl_ij î_i ; ∂/∂ls = Σ dl_ij · logits_ij
	for i := 0; i < nI; i++ {
		for j := 0; j < nT; j++ {
			dl := dlogits[i*nT+j]
			if dl == 0 {
				continue
			}
			dScale += float64(dl) * float64(c.logits[i*nT+j])
			g := c.s * dl
			a, b := c.ni[i*E:i*E+E], c.nt[j*E:j*E+E]
			da, db := c.dni[i*E:i*E+E], c.dnt[j*E:j*E+E]
			for k := range a {
				da[k] += g * b[k]
				db[k] += g * a[k]
			}
		}
	}
	NormBackward(dImg, c.dni, c.ni, c.normI, nI, E)
	NormBackward(dTxt, c.dnt, c.nt, c.normT, nT, E)
	return dScale
}

// NormalizeRows scales the n rows of x [n, d] to unit L2 norm in place and
// returns their norms (in norms, grown as needed).
func NormalizeRows(norms, x []float32, n, d int) []float32 {
	norms = growF(norms, n)
	for i := 0; i < n; i++ {
		row := x[i*d : i*d+d]
		var s float64
		for _, v := range row {
			s += float64(v) * float64(v)
		}
		nr := float32(math.Sqrt(s))
		norms[i] = nr
		for j := range row {
			row[j] /= nr
		}
	}
	return norms
}

// NormBackward writes dx = (dn − n̂(n̂·dn))/‖x‖ for rows of x = ‖x‖·n̂.
func NormBackward(dx, dn, nhat, norms []float32, n, d int) {
	for i := 0; i < n; i++ {
		var dot float32
		for k := 0; k < d; k++ {
			dot += nhat[i*d+k] * dn[i*d+k]
		}
		for k := 0; k < d; k++ {
			dx[i*d+k] = (dn[i*d+k] - nhat[i*d+k]*dot) / norms[i]
		}
	}
}
