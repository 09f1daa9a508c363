package fedmvp

import (
	"math"

	"github.com/pfedmma/pfedmma/gemm"
	"github.com/pfedmma/pfedmma/nn"
)

// The PromptFormer's layers, one forward and one backward function each.
// Backward functions accumulate (+=) into the gradients they are given; a
// nil gradient is skipped.

// loraForward is the authors' apply_lora: out = x + (x·A)·B.
//
//	x, out: [N, D]; A: [D, r]; B: [r, D]; xa: [N, r] (saved for backward)
func loraForward(out, xa, x, A, B []float32, N, D, r int) {
	gemm.MatMul(false, false, N, r, D, x, A, xa, false)  // xa = x·A
	copy(out[:N*D], x[:N*D])                             // out = x
	gemm.MatMul(false, false, N, D, r, xa, B, out, true) // out += xa·B
}

// loraBackward: dx += dout + dout·Bᵀ·Aᵀ, dA += xᵀ·(dout·Bᵀ), dB += xaᵀ·dout.
//
//	dout, x: [N, D]; xa: [N, r] from the forward; dxa: [N, r] scratch
func loraBackward(dx, dA, dB, dxa, dout, x, xa, A, B []float32, N, D, r int) {
	gemm.MatMul(false, true, N, r, D, dout, B, dxa, false) // dxa = dout·Bᵀ
	if dB != nil {
		gemm.MatMul(true, false, r, D, N, xa, dout, dB, true) // dB += xaᵀ·dout
	}
	if dA != nil {
		gemm.MatMul(true, false, D, r, N, x, dxa, dA, true) // dA += xᵀ·dxa
	}
	if dx != nil {
		nn.AddInto(dx[:N*D], dout[:N*D])
		gemm.MatMul(false, true, N, D, r, dxa, A, dx, true) // dx += dxa·Aᵀ
	}
}

// gelu is PyTorch's exact GELU, x·Φ(x).
func gelu(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }

// geluGrad is d gelu/dx = Φ(x) + x·φ(x).
func geluGrad(x float64) float64 {
	return 0.5*(1+math.Erf(x/math.Sqrt2)) + x*math.Exp(-0.5*x*x)/math.Sqrt(2*math.Pi)
}

// gegluForward is the authors' GEGLU: u = [a | g] → a ⊙ gelu(g).
//
//	u: [N, 2F]; out: [N, F]
func gegluForward(out, u []float32, N, F int) {
	nn.ParallelFor(N, 16, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			a, g, o := u[i*2*F:i*2*F+F], u[i*2*F+F:(i+1)*2*F], out[i*F:(i+1)*F]
			for j := range o {
				o[j] = a[j] * float32(gelu(float64(g[j])))
			}
		}
	})
}

// gegluBackward: da = dout ⊙ gelu(g), dg = dout ⊙ a ⊙ gelu'(g).
//
//	dout: [N, F]; u: [N, 2F] from the forward; du: [N, 2F] (written)
func gegluBackward(du, dout, u []float32, N, F int) {
	nn.ParallelFor(N, 16, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			a, g, d := u[i*2*F:i*2*F+F], u[i*2*F+F:(i+1)*2*F], dout[i*F:(i+1)*F]
			da, dg := du[i*2*F:i*2*F+F], du[i*2*F+F:(i+1)*2*F]
			for j := range d {
				gj := float64(g[j])
				da[j] = d[j] * float32(gelu(gj))
				dg[j] = d[j] * a[j] * float32(geluGrad(gj))
			}
		}
	})
}

// poolBins are PyTorch's AdaptiveAvgPool1d bins of n positions into k:
// bin i covers [⌊i·n/k⌋, ⌈(i+1)·n/k⌉).
func poolBins(n, k int) [][2]int {
	out := make([][2]int, k)
	for i := range out {
		out[i] = [2]int{i * n / k, ((i+1)*n + k - 1) / k}
	}
	return out
}

// poolForward averages the P rows of each of B sequences into K rows
// (AdaptiveAvgPool1d(K) along the sequence).
//
//	y: [B, P, D]; out: [B, K, D]
func poolForward(out, y []float32, bins [][2]int, B, P, D int) {
	K := len(bins)
	for b := 0; b < B; b++ {
		for k, bin := range bins {
			o := out[(b*K+k)*D : (b*K+k+1)*D]
			clear(o)
			for p := bin[0]; p < bin[1]; p++ {
				nn.AddInto(o, y[(b*P+p)*D:(b*P+p+1)*D])
			}
			inv := 1 / float32(bin[1]-bin[0])
			for j := range o {
				o[j] *= inv
			}
		}
	}
}

// poolBackward spreads each pooled row's gradient evenly over its bin.
//
//	dout: [B, K, D]; dy: [B, P, D] (+=)
func poolBackward(dy, dout []float32, bins [][2]int, B, P, D int) {
	K := len(bins)
	for b := 0; b < B; b++ {
		for k, bin := range bins {
			d := dout[(b*K+k)*D : (b*K+k+1)*D]
			inv := 1 / float32(bin[1]-bin[0])
			for p := bin[0]; p < bin[1]; p++ {
				nn.AddScaledInto(dy[(b*P+p)*D:(b*P+p+1)*D], d, inv)
			}
		}
	}
}
