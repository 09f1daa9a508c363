package fedclip

import (
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/nn"
)

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
	head              clip.CosineLogits
	logits            []float32 // L [B, B], owned by head
	lt, dl, dlt, dtxt []float32
	targets           []int
	B, D              int
	// LossImg and LossTxt are the two terms of the last Forward.
	LossImg, LossTxt float64
}

// Forward returns L [B, B] (owned by c) and the loss for g [B, d] and t
// [B, d]; the two terms are left in LossImg (CE of L's rows) and LossTxt
// (CE of Lᵀ's rows).
func (c *ContrastiveLoss) Forward(g, t []float32, B, d int, logitScale float32) ([]float32, float64) {
	c.B, c.D = B, d
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
	return c.logits[:B*B], (c.LossImg + c.LossTxt) / 2
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
	c.dtxt = nn.Grow(c.dtxt, B*c.D) // the frozen text's gradient, discarded
	c.head.Backward(c.dl[:B*B], dg, c.dtxt)
}

// transpose writes out [n, m] = inᵀ for in [m, n].
func transpose(out, in []float32, m, n int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			out[j*m+i] = in[i*n+j]
		}
	}
}
