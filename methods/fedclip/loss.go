package fedclip

import (
	"math"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/gemm"
	"github.com/pfedmma/pfedmma/nn"
)

// Cosine is CLIP's cosine head on raw features as one matrix product,
//
//	L = e^{logit_scale} · ĝ t̂ᵀ      ĝ = g/‖g‖ [B, d], t̂ = t/‖t‖ [N, d], L [B, N]
//
// with the gradient to g only (the text is frozen). Forward keeps ĝ, t̂ and
// ‖g‖ for Backward, in reused buffers.
type Cosine struct {
	gn, tn, norms, dgn []float32
	out                []float32
	s                  float32
	B, N, D            int
}

// Forward returns L [B, N] (owned by c) for g [B, d] and t [N, d].
func (c *Cosine) Forward(g, t []float32, B, N, d int, logitScale float32) []float32 {
	c.B, c.N, c.D = B, N, d
	c.s = float32(math.Exp(float64(logitScale)))
	c.gn = append(c.gn[:0], g[:B*d]...)
	c.tn = append(c.tn[:0], t[:N*d]...)
	c.norms = clip.Normalize(c.gn, B, d)
	clip.Normalize(c.tn, N, d)
	c.out = nn.Grow(c.out, B*N)
	gemm.MatMul(false, true, B, N, d, c.gn, c.tn, c.out, false) // ĝ t̂ᵀ
	for i := range c.out[:B*N] {
		c.out[i] *= c.s
	}
	return c.out[:B*N]
}

// Backward writes dg [B, d] (overwritten) from dL [B, N]:
// dĝ = e^{logit_scale}·dL t̂, then through the normalisation.
func (c *Cosine) Backward(dg, dL []float32) {
	B, N, d := c.B, c.N, c.D
	c.dgn = nn.Grow(c.dgn, B*d)
	gemm.MatMul(false, false, B, d, N, dL, c.tn, c.dgn, false) // dL t̂
	for i := range c.dgn[:B*d] {
		c.dgn[i] *= c.s
	}
	clip.NormBackward(dg, c.dgn, c.gn, c.norms, B, d)
}

// ContrastiveLoss is CLIP's symmetric contrastive loss inside a batch, as
// FedCLIP's code computes it: image i's text is the prompt of its own
// class, so the targets are the diagonal,
//
//	L = e^{logit_scale} · ĝ t̂ᵀ                       [B, B]
//	loss = (CE(L, 0..B−1) + CE(Lᵀ, 0..B−1)) / 2
//
// for adapted image features g [B, d] and text features t [B, d] (rows
// repeat for repeated labels: two images of one class are each other's
// negatives, and the loss cannot reach zero). No gradient reaches the text.
type ContrastiveLoss struct {
	head        Cosine
	logits      []float32 // L [B, B], owned by head
	lt, dl, dlt []float32
	targets     []int
	B           int
	// LossImg and LossTxt are the two terms of the last Forward.
	LossImg, LossTxt float64
}

// Forward returns L [B, B] (owned by c) and the loss for g [B, d] and t
// [B, d]; the two terms are left in LossImg (CE of L's rows) and LossTxt
// (CE of Lᵀ's rows).
func (c *ContrastiveLoss) Forward(g, t []float32, B, d int, logitScale float32) ([]float32, float64) {
	c.B = B
	c.logits = c.head.Forward(g, t, B, B, d, logitScale)
	c.targets = c.targets[:0]
	for i := 0; i < B; i++ {
		c.targets = append(c.targets, i)
	}
	c.lt = nn.Grow(c.lt, B*B)
	transpose(c.lt, c.logits, B, B)
	c.dl, c.dlt = nn.Grow(c.dl, B*B), nn.Grow(c.dlt, B*B)
	c.LossImg = clip.CrossEntropy(c.logits, c.targets, B, B, c.dl)
	c.LossTxt = clip.CrossEntropy(c.lt, c.targets, B, B, c.dlt)
	return c.logits, (c.LossImg + c.LossTxt) / 2
}

// Backward writes dg [B, d] (overwritten), the gradient of Forward's loss
// with respect to g.
func (c *ContrastiveLoss) Backward(dg []float32) {
	B := c.B
	// dL = (dCE(L) + dCE(Lᵀ)ᵀ) / 2
	for i := 0; i < B; i++ {
		for j := 0; j < B; j++ {
			c.dl[i*B+j] = (c.dl[i*B+j] + c.dlt[j*B+i]) / 2
		}
	}
	c.head.Backward(dg, c.dl[:B*B])
}

// transpose writes out [n, m] = inᵀ for in [m, n].
func transpose(out, in []float32, m, n int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			out[j*m+i] = in[i*n+j]
		}
	}
}
