//go:build purego

package nn

import "math"

// quickGELUForwardKernel computes out = x·σ(1.702x) over equal-length slices.
func quickGELUForwardKernel(out, in []float32) {
	for i, x := range in {
		out[i] = x / (1 + Expf(-1.702*x))
	}
}

// quickGELUBackwardKernel accumulates din += dout·QuickGELU'(in).
func quickGELUBackwardKernel(din, dout, in []float32) {
	for i, x := range in {
		s := 1 / (1 + Expf(-1.702*x))
		din[i] += dout[i] * (s + 1.702*x*s*(1-s))
	}
}

// softmaxRowKernel applies softmax to row[:nv] and zeroes row[nv:].
func softmaxRowKernel(row []float32, nv int) {
	mx := float32(math.Inf(-1))
	for _, x := range row[:nv] {
		mx = max(mx, x)
	}
	var sum float32
	for j := 0; j < nv; j++ {
		e := Expf(row[j] - mx)
		row[j] = e
		sum += e
	}
	inv := 1 / sum
	for j := 0; j < nv; j++ {
		row[j] *= inv
	}
	clear(row[nv:])
}

// softmaxBackwardRowKernel computes dp = p ⊙ (dp − Σ p⊙dp) · scale.
func softmaxBackwardRowKernel(p, dp []float32, scale float32) {
	var dot float32
	for j := range p {
		dot += p[j] * dp[j]
	}
	for j := range p {
		dp[j] = p[j] * (dp[j] - dot) * scale
	}
}

// layerNormForwardKernel normalises the n rows of inp [n, c] in float32.
func layerNormForwardKernel(out, mean, rstd, inp, w, b []float32, n, c int) {
	for i := 0; i < n; i++ {
		x := inp[i*c : i*c+c]
		m := sum8(x, 0, false) / float32(c)
		vs := sum8(x, m, true)
		rs := 1 / float32(math.Sqrt(float64(vs/float32(c)+LayerNormEps)))
		o := out[i*c : i*c+c]
		for j, v := range x {
			o[j] = (v-m)*rs*w[j] + b[j]
		}
		if mean != nil {
			mean[i], rstd[i] = m, rs
		}
	}
}

// layerNormBackwardDxKernel accumulates the input gradient of n rows.
func layerNormBackwardDxKernel(dinp, dout, inp, mean, rstd, w []float32, n, c int) {
	for i := 0; i < n; i++ {
		x, g := inp[i*c:i*c+c], dout[i*c:i*c+c]
		m, rs := mean[i], rstd[i]
		var sumD, sumDX float32
		for j := range x {
			xhat := (x[j] - m) * rs
			d := g[j] * w[j]
			sumD += d
			sumDX += d * xhat
		}
		sumD /= float32(c)
		sumDX /= float32(c)
		dx := dinp[i*c : i*c+c]
		for j := range x {
			xhat := (x[j] - m) * rs
			dx[j] += rs * (g[j]*w[j] - sumD - xhat*sumDX)
		}
	}
}

// layerNormBackwardDwKernel accumulates columns [lo, hi) of dw and db (either may be nil).
func layerNormBackwardDwKernel(dw, db, dout, inp, mean, rstd []float32, n, c, lo, hi int) {
	for i := 0; i < n; i++ {
		x, g := inp[i*c:i*c+c], dout[i*c:i*c+c]
		m, rs := mean[i], rstd[i]
		for j := lo; j < hi; j++ {
			if dw != nil {
				dw[j] += g[j] * (x[j] - m) * rs
			}
			if db != nil {
				db[j] += g[j]
			}
		}
	}
}

// axpyKernel computes dst += a·src over equal-length slices.
func axpyKernel(dst, src []float32, a float32) {
	for i, v := range src {
		dst[i] += a * v
	}
}

// sum8 is Σ x, or Σ (x−m)² when squared, in 8 interleaved partial sums
// (the order of the vectorised C kernel, more accurate than one chain).
func sum8(x []float32, m float32, squared bool) float32 {
	var acc [8]float32
	for j, v := range x {
		if squared {
			v = (v - m) * (v - m)
		}
		acc[j%8] += v
	}
	var s float32
	for _, a := range acc {
		s += a
	}
	return s
}
