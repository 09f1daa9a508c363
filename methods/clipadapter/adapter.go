package clipadapter

import (
	"github.com/pfedmma/pfedmma/nn"
)

// Adapter is CLIP-Adapter's residual image-feature adapter:
//
//	A(f) = ReLU(ReLU(f W1ᵀ) W2ᵀ),  W1 [k, d], W2 [d, k] (no biases)
//	f'   = α·A(f) + (1 − α)·f
//
// Forward keeps the two ReLU outputs Backward needs, in reused buffers.
type Adapter struct {
	Alpha float32
	z, a  []float32 // ReLU(f W1ᵀ) [B, k], A(f) [B, d]
	dz    []float32
	da    []float32
	B     int
}

// Forward writes out [B, d] = f' for features f [B, d].
func (ad *Adapter) Forward(out, f, w1, w2 []float32, B, d, k int) {
	ad.B = B
	ad.z, ad.a = nn.Grow(ad.z, B*k), nn.Grow(ad.a, B*d)
	nn.LinearForward(ad.z, f, w1, nil, B, d, k)
	nn.ReLUForward(ad.z, ad.z, B*k)
	nn.LinearForward(ad.a, ad.z, w2, nil, B, k, d)
	nn.ReLUForward(ad.a, ad.a, B*d)
	for i := 0; i < B*d; i++ {
		out[i] = ad.Alpha*ad.a[i] + (1-ad.Alpha)*f[i]
	}
}

// Backward accumulates dw1 [k, d] and dw2 [d, k] from dout [B, d] (the
// features f are frozen: no input gradient).
func (ad *Adapter) Backward(dw1, dw2, dout, f, w2 []float32, d, k int) {
	B := ad.B
	ad.da = nn.Grow(ad.da, B*d)
	for i := 0; i < B*d; i++ { // through α· and the outer ReLU
		if ad.a[i] > 0 {
			ad.da[i] = ad.Alpha * dout[i]
		} else {
			ad.da[i] = 0
		}
	}
	ad.dz = nn.Grow(ad.dz, B*k)
	clear(ad.dz)
	nn.LinearBackward(ad.dz, dw2, nil, ad.da, ad.z, w2, B, k, d)
	for i, z := range ad.z[:B*k] { // through the inner ReLU
		if z <= 0 {
			ad.dz[i] = 0
		}
	}
	nn.LinearBackward(nil, dw1, nil, ad.dz, f, nil, B, d, k)
}
