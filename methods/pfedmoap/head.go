package pfedmoap

import (
	"fmt"
	"math"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/nn"
)

// PoolForward writes out [n, d] = x[:, ::r] for x [n, d·r] (the authors'
// parameter-free strided pooling).
func PoolForward(out, x []float32, n, d, r int) {
	for i := 0; i < n; i++ {
		for k := 0; k < d; k++ {
			out[i*d+k] = x[(i*d+k)*r]
		}
	}
}

// PoolBackward accumulates dx[:, ::r] += dout for dout [n, d], dx [n, d·r].
func PoolBackward(dx, dout []float32, n, d, r int) {
	for i := 0; i < n; i++ {
		for k := 0; k < d; k++ {
			dx[(i*d+k)*r] += dout[i*d+k]
		}
	}
}

// Head is pFedMoAP's classifier on features:
//
//	Î = normalise(img) [B, E], T̂ = normalise(txt) [C, E]      (r = E / D)
//	kv[c] = [pool(T̂_c); experts[0][c]; …]                       [C, Ex, D]
//	out   = Gate(pool(Î), kv)                                    [C, B, D]
//	logits[b, c] = λ·s·⟨Î_b, T̂_c⟩ + s·⟨pool(Î_b), out[c, b]⟩,  s = exp(logit_scale)
//
// With no experts it is the plain CoOp head s·⟨Î_b, T̂_c⟩ (a first-time
// participant trains its prompt without the gate). The image side has no
// gradient (the image encoder is frozen); Backward returns the gradient with
// respect to the raw text features and accumulates the gate's.
type Head struct {
	Gate   *Gate
	Lambda float32

	img, pimg      []float32 // Î [B, E], pool(Î) [B, D]
	txt, norms     []float32 // T̂ [C, E] and the raw rows' norms
	ptxt, kv       []float32 // pool(T̂) [C, D], [C, Ex, D]
	logits, dout   []float32
	dtn, dtxt, dpt []float32
	B, C, E, Ex    int
	s              float32
}

// Forward returns logits [B, C] (owned by h) for raw image features img
// [B, E], raw local text features txt [C, E] and the pooled, normalised
// expert features experts [K, C, D] (K may be 0).
func (h *Head) Forward(img, txt []float32, B, C, E int, experts []float32, logitScale float32) ([]float32, error) {
	D := h.Gate.D
	if E%D != 0 {
		return nil, fmt.Errorf("pfedmoap: feature dimension %d is not a multiple of the gate width %d (pfedmoap.gate_width)", E, D)
	}
	if len(img) != B*E || len(txt) != C*E || len(experts)%(C*D) != 0 {
		return nil, fmt.Errorf("pfedmoap: head inputs of %d, %d, %d values do not fit B %d, C %d, E %d, D %d", len(img), len(txt), len(experts), B, C, E, D)
	}
	r := E / D
	K := len(experts) / (C * D)
	h.B, h.C, h.E, h.Ex = B, C, E, K+1
	h.s = float32(math.Exp(float64(logitScale)))
	h.img = append(h.img[:0], img...)
	clip.NormalizeRows(nil, h.img, B, E)
	h.txt = append(h.txt[:0], txt...)
	h.norms = clip.NormalizeRows(h.norms, h.txt, C, E)
	h.logits = nn.Grow(h.logits, B*C)
	lam := h.Lambda
	if K == 0 {
		lam = 1
	}
	for b := 0; b < B; b++ {
		for c := 0; c < C; c++ {
			h.logits[b*C+c] = lam * h.s * dot(h.img[b*E:(b+1)*E], h.txt[c*E:(c+1)*E])
		}
	}
	if K == 0 {
		return h.logits, nil
	}
	h.pimg, h.ptxt = nn.Grow(h.pimg, B*D), nn.Grow(h.ptxt, C*D)
	PoolForward(h.pimg, h.img, B, D, r)
	PoolForward(h.ptxt, h.txt, C, D, r)
	h.kv = nn.Grow(h.kv, C*h.Ex*D)
	for c := 0; c < C; c++ {
		copy(h.kv[c*h.Ex*D:], h.ptxt[c*D:(c+1)*D])
		for k := 0; k < K; k++ {
			copy(h.kv[(c*h.Ex+1+k)*D:], experts[(k*C+c)*D:(k*C+c+1)*D])
		}
	}
	out := h.Gate.Forward(h.pimg, B, h.kv, C, h.Ex)
	for b := 0; b < B; b++ {
		for c := 0; c < C; c++ {
			h.logits[b*C+c] += h.s * dot(h.pimg[b*D:(b+1)*D], out[(c*B+b)*D:(c*B+b+1)*D])
		}
	}
	return h.logits, nil
}

// Backward takes dlogits [B, C], accumulates the gate's gradients and
// returns the gradient with respect to the raw text features [C, E] (owned
// by h, overwritten by each call).
func (h *Head) Backward(dlogits []float32) []float32 {
	B, C, E := h.B, h.C, h.E
	h.dtn = nn.Grow(h.dtn, C*E)
	clear(h.dtn)
	lam := h.Lambda
	if h.Ex == 1 {
		lam = 1
	}
	// ∂/∂T̂_c = λ·s·Σ_b dl[b, c]·Î_b
	for c := 0; c < C; c++ {
		dt := h.dtn[c*E : (c+1)*E]
		for b := 0; b < B; b++ {
			g := lam * h.s * dlogits[b*C+c]
			for k, x := range h.img[b*E : (b+1)*E] {
				dt[k] += g * x
			}
		}
	}
	if h.Ex > 1 {
		D := h.Gate.D
		// ∂/∂out[c, b] = s·dl[b, c]·pool(Î_b)
		h.dout = nn.Grow(h.dout, C*B*D)
		for c := 0; c < C; c++ {
			for b := 0; b < B; b++ {
				g := h.s * dlogits[b*C+c]
				o := h.dout[(c*B+b)*D : (c*B+b+1)*D]
				for k, x := range h.pimg[b*D : (b+1)*D] {
					o[k] = g * x
				}
			}
		}
		_, dkv := h.Gate.Backward(h.dout)
		// only key/value 0 of each class (the local prompt) has a gradient
		h.dpt = nn.Grow(h.dpt, C*D)
		for c := 0; c < C; c++ {
			copy(h.dpt[c*D:(c+1)*D], dkv[c*h.Ex*D:(c*h.Ex+1)*D])
		}
		PoolBackward(h.dtn, h.dpt, C, D, E/D)
	}
	h.dtxt = nn.Grow(h.dtxt, C*E)
	clip.NormBackward(h.dtxt, h.dtn, h.txt, h.norms, C, E)
	return h.dtxt
}

func dot(a, b []float32) float32 {
	var s float32
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}
