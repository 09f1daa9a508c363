package fedot

import (
	"github.com/pfedmma/pfedmma/gemm"
	"github.com/pfedmma/pfedmma/nn"
)

// LinearForward is FedLT's unconstrained local map h' = W h, W [d, d] (init I).
//
//	h, out: [B, d]; w: [d, d]
func LinearForward(out, h, w []float32, B, d int) {
	nn.LinearForward(out, h, w, nil, B, d, d)
}

// LinearBackward accumulates dw [d, d] from dout [B, d] (h: [B, d]).
func LinearBackward(dw, dout, h []float32, B, d int) {
	nn.LinearBackward(nil, dw, nil, dout, h, nil, B, d, d)
}

// Adapter is FedAdapter's local nonlinear map, a residual MLP
//
//	h' = h + ReLU(h Downᵀ) Upᵀ,   Down [k, d], Up [d, k]
//
// with Up initialised to zero (h' = h at the start, as FedOT's W = I).
// Forward keeps the hidden activations Backward needs.
type Adapter struct {
	z, dz []float32 // ReLU(h Downᵀ) [B, k] and its gradient
	B     int
}

// Forward writes out [B, d] for h [B, d].
func (a *Adapter) Forward(out, h, down, up []float32, B, d, k int) {
	a.B = B
	a.z = nn.Grow(a.z, B*k)
	nn.LinearForward(a.z, h, down, nil, B, d, k)
	nn.ReLUForward(a.z, a.z, B*k)
	copy(out[:B*d], h[:B*d])
	gemm.MatMul(false, true, B, d, k, a.z, up, out, true) // out = h + z Upᵀ
}

// Backward accumulates ddown [k, d] and dup [d, k] from dout [B, d].
func (a *Adapter) Backward(ddown, dup, dout, h, up []float32, d, k int) {
	B := a.B
	a.dz = nn.Grow(a.dz, B*k)
	clear(a.dz)
	nn.LinearBackward(a.dz, dup, nil, dout, a.z, up, B, k, d)
	for i, z := range a.z[:B*k] { // through the ReLU (z > 0 where its input was)
		if z <= 0 {
			a.dz[i] = 0
		}
	}
	nn.LinearBackward(nil, ddown, nil, a.dz, h, nil, B, d, k)
}
