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
