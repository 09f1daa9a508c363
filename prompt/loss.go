package prompt

import (
	"fmt"
	"math"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/nn"
)

// CosineCE is the classifier loss of the prompt methods:
//
//	logits[b, c] = exp(logitScale) · cos(img_b, txt_c)      [B, C]
//	loss         = mean_b CE(logits[b], labels[b])
//
// on raw (unnormalised) features. It keeps its buffers between calls.
type CosineCE struct {
	head             clip.CosineLogits
	logits, dl, dImg []float32
	dTxt             []float32
}

// Loss computes the loss of img [B, E] against txt [C, E] and returns it
// with the logits [B, C] and the gradient with respect to txt [C, E] (both
// owned by c, valid until the next call). Labels must lie in 0..C−1.
func (c *CosineCE) Loss(img, txt []float32, B, C, E int, logitScale float32, labels []int) (float64, []float32, []float32, error) {
	if len(labels) != B {
		return 0, nil, nil, fmt.Errorf("prompt: %d labels for %d images", len(labels), B)
	}
	if len(img) != B*E {
		return 0, nil, nil, fmt.Errorf("prompt: image features have %d values, want %d × %d", len(img), B, E)
	}
	for i, y := range labels {
		if y < 0 || y >= C {
			return 0, nil, nil, fmt.Errorf("prompt: label %d of sample %d outside 0..%d", y, i, C-1)
		}
	}
	c.logits = nn.Grow(c.logits, B*C)
	copy(c.logits, c.head.Forward(img, txt, B, C, E, logitScale))
	// softmax cross-entropy, mean over the batch: dlogits = (p − onehot)/B
	c.dl = nn.Grow(c.dl, B*C)
	var loss float64
	for i := 0; i < B; i++ {
		row := c.logits[i*C : i*C+C]
		lse := clip.LogSumExp(row)
		loss += lse - float64(row[labels[i]])
		for j, v := range row {
			c.dl[i*C+j] = float32(math.Exp(float64(v)-lse) / float64(B))
		}
		c.dl[i*C+labels[i]] -= float32(1 / float64(B))
	}
	c.dImg, c.dTxt = nn.Grow(c.dImg, B*E), nn.Grow(c.dTxt, C*E)
	c.head.Backward(c.dl, c.dImg, c.dTxt)
	return loss / float64(B), c.logits, c.dTxt, nil
}

// Cosines writes cos[r] = ⟨a_r, b_r⟩ / (‖a_r‖·‖b_r‖) for the rows of
// a, b [R, E] (float64 accumulation).
func Cosines(cos, a, b []float32, R, E int) {
	for r := 0; r < R; r++ {
		x, y := a[r*E:r*E+E], b[r*E:r*E+E]
		xy, xx, yy := dots(x, y)
		cos[r] = float32(xy / math.Sqrt(xx*yy))
	}
}

// dots is ⟨x, y⟩, ⟨x, x⟩ and ⟨y, y⟩ with float64 accumulation.
func dots(x, y []float32) (xy, xx, yy float64) {
	for k := range x {
		xy += float64(x[k]) * float64(y[k])
		xx += float64(x[k]) * float64(x[k])
		yy += float64(y[k]) * float64(y[k])
	}
	return xy, xx, yy
}

// CosinesBackward accumulates the gradient of Cosines: for dcos [R] it adds
//
//	da_r += dcos_r · (b̂_r − cos_r·â_r) / ‖a_r‖,  db_r += dcos_r · (â_r − cos_r·b̂_r) / ‖b_r‖
//
// into da and db [R, E]; either may be nil (a constant argument).
func CosinesBackward(da, db, dcos, a, b []float32, R, E int) {
	for r := 0; r < R; r++ {
		x, y := a[r*E:r*E+E], b[r*E:r*E+E]
		xy, xx, yy := dots(x, y)
		nx, ny := math.Sqrt(xx), math.Sqrt(yy)
		cos, g := xy/(nx*ny), float64(dcos[r])
		if da != nil {
			d := da[r*E : r*E+E]
			for k := range d {
				d[k] += float32(g * (float64(y[k])/ny - cos*float64(x[k])/nx) / nx)
			}
		}
		if db != nil {
			d := db[r*E : r*E+E]
			for k := range d {
				d[k] += float32(g * (float64(x[k])/nx - cos*float64(y[k])/ny) / ny)
			}
		}
	}
}
