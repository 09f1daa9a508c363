package nn

import "math"

// LayerNormEps is the epsilon of every LayerNorm in CLIP.
const LayerNormEps = 1e-5

// LayerNormForward normalises each row of inp over its C features.
//
//	inp, out: [N, C]; w, b: [C]; mean, rstd: [N] (saved for the backward pass; may be nil)
//
// out = (inp - mean) * rstd * w + b with rstd = 1/sqrt(var + eps) and the
// biased variance, as torch.nn.LayerNorm.
func LayerNormForward(out, mean, rstd, inp, w, b []float32, N, C int) {
	ParallelFor(N, 64, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x := inp[i*C : i*C+C]
			var m float64
			for _, v := range x {
				m += float64(v)
			}
			m /= float64(C)
			var s float64
			for _, v := range x {
				d := float64(v) - m
				s += d * d
			}
			rs := 1 / math.Sqrt(s/float64(C)+LayerNormEps)
			o := out[i*C : i*C+C]
			mf, rf := float32(m), float32(rs)
			for j, v := range x {
				o[j] = (v-mf)*rf*w[j] + b[j]
			}
			if mean != nil {
				mean[i], rstd[i] = mf, rf
			}
		}
	})
}

// LayerNormBackward accumulates the gradients of LayerNormForward.
//
//	dout, inp: [N, C]; mean, rstd: [N] from the forward pass; w: [C]
//	dinp: [N, C] (+=, may be nil); dw, db: [C] (+=, may be nil)
func LayerNormBackward(dinp, dw, db, dout, inp, mean, rstd, w []float32, N, C int) {
	if dinp != nil {
		ParallelFor(N, 64, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				x := inp[i*C : i*C+C]
				g := dout[i*C : i*C+C]
				m, rs := mean[i], rstd[i]
				// dnorm = g*w; dx = rs * (dnorm - mean(dnorm) - xhat*mean(dnorm*xhat))
				var sumD, sumDX float32
				for j := range x {
					xhat := (x[j] - m) * rs
					d := g[j] * w[j]
					sumD += d
					sumDX += d * xhat
				}
				sumD /= float32(C)
				sumDX /= float32(C)
				dx := dinp[i*C : i*C+C]
				for j := range x {
					xhat := (x[j] - m) * rs
					dx[j] += rs * (g[j]*w[j] - sumD - xhat*sumDX)
				}
			}
		})
	}
	if dw != nil || db != nil {
		for i := 0; i < N; i++ {
			x := inp[i*C : i*C+C]
			g := dout[i*C : i*C+C]
			m, rs := mean[i], rstd[i]
			for j := range x {
				if dw != nil {
					dw[j] += g[j] * (x[j] - m) * rs
				}
				if db != nil {
					db[j] += g[j]
				}
			}
		}
	}
}
