package fedclip

import "github.com/pfedmma/pfedmma/nn"

// Weights are the adapter's four tensors (PyTorch Linear layout).
type Weights struct {
	W1 []float32 // img_adap.0.weight [d, d]
	B1 []float32 // img_adap.0.bias [d]
	W2 []float32 // img_adap.2.weight [d, d]
	B2 []float32 // img_adap.2.bias [d]
}

// Adapter is FedCLIP's attention adapter on frozen image features f [B, d]
// (img_adap = Sequential(Linear, Tanh, Linear, Softmax(dim=1)), then a
// gate):
//
//	h = tanh(f W1ᵀ + b1)            [B, d]
//	a = softmax(h W2ᵀ + b2)         [B, d], over the feature axis
//	g = a ⊙ f                       [B, d]
//
// Forward keeps h and a for Backward, in reused buffers.
type Adapter struct {
	h, a   []float32 // [B, d]
	da, dz []float32 // [B, d]
	dh     []float32 // [B, d]
	B, D   int
}

// TanhForward writes out = tanh(in) = 1 − 2/(e^{2·in} + 1) for n values
// (out may alias in), with the float32 exponential (absolute error about
// 1e-7).
func TanhForward(out, in []float32, n int) {
	for i, v := range in[:n] {
		out[i] = 1 - 2/(nn.Expf(2*v)+1)
	}
}

// TanhBackward writes din = dout ⊙ (1 − out²) for n values, out = tanh(in).
func TanhBackward(din, dout, out []float32, n int) {
	for i, y := range out[:n] {
		din[i] = dout[i] * (1 - y*y)
	}
}

// SoftmaxForward writes out [B, d] = softmax of each row of in [B, d]
// (out may alias in).
func SoftmaxForward(out, in []float32, B, d int) {
	for b := 0; b < B; b++ {
		x, y := in[b*d:(b+1)*d], out[b*d:(b+1)*d]
		mx := x[0]
		for _, v := range x {
			mx = max(mx, v)
		}
		var sum float64
		for k, v := range x {
			e := nn.Expf(v - mx)
			y[k] = e
			sum += float64(e)
		}
		inv := float32(1 / sum)
		for k := range y {
			y[k] *= inv
		}
	}
}

// SoftmaxBackward writes din [B, d] = a ⊙ (dout − Σ_k a_k·dout_k) per row,
// for a = softmax(in) [B, d] (din may alias dout).
func SoftmaxBackward(din, dout, a []float32, B, d int) {
	for b := 0; b < B; b++ {
		ab, db, gb := a[b*d:(b+1)*d], dout[b*d:(b+1)*d], din[b*d:(b+1)*d]
		var dot float64
		for k := range ab {
			dot += float64(ab[k]) * float64(db[k])
		}
		for k := range ab {
			gb[k] = ab[k] * (db[k] - float32(dot))
		}
	}
}

// GateForward writes g = a ⊙ f for n values.
func GateForward(g, a, f []float32, n int) {
	for i := range g[:n] {
		g[i] = a[i] * f[i]
	}
}

// GateBackward writes da = dg ⊙ f for n values (f is frozen: no df).
func GateBackward(da, dg, f []float32, n int) {
	for i := range da[:n] {
		da[i] = dg[i] * f[i]
	}
}

// Forward writes g [B, d] = a ⊙ f for features f [B, d] and returns the
// attention a [B, d] (owned by ad).
func (ad *Adapter) Forward(g, f []float32, w Weights, B, d int) []float32 {
	ad.B, ad.D = B, d
	n := B * d
	ad.h, ad.a = nn.Grow(ad.h, n), nn.Grow(ad.a, n)
	nn.LinearForward(ad.h, f, w.W1, w.B1, B, d, d) // f W1ᵀ + b1
	TanhForward(ad.h, ad.h, n)
	nn.LinearForward(ad.a, ad.h, w.W2, w.B2, B, d, d) // z = h W2ᵀ + b2
	SoftmaxForward(ad.a, ad.a, B, d)
	GateForward(g, ad.a, f, n)
	return ad.a[:n]
}

// Backward accumulates (+=) the weights' gradients into dw from dg [B, d],
// the gradient with respect to Forward's g; f is Forward's input.
func (ad *Adapter) Backward(dw Weights, dg, f []float32, w Weights) {
	B, d := ad.B, ad.D
	n := B * d
	ad.da, ad.dz, ad.dh = nn.Grow(ad.da, n), nn.Grow(ad.dz, n), nn.Grow(ad.dh, n)
	GateBackward(ad.da, dg, f, n)
	SoftmaxBackward(ad.dz, ad.da, ad.a, B, d)
	clear(ad.dh[:n])
	nn.LinearBackward(ad.dh, dw.W2, dw.B2, ad.dz, ad.h, w.W2, B, d, d)
	TanhBackward(ad.dh, ad.dh, ad.h, n)
	nn.LinearBackward(nil, dw.W1, dw.B1, ad.dh, f, nil, B, d, d)
}
