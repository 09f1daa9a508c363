package nn

// QuickGELUForward is CLIP's activation x·σ(1.702x), elementwise over n values.
func QuickGELUForward(out, inp []float32, n int) {
	ParallelFor(n, 1<<14, func(lo, hi int) {
		quickGELUForwardKernel(out[lo:hi], inp[lo:hi])
	})
}

// QuickGELUBackward accumulates dinp += dout · d/dx[x·σ(1.702x)]
// = dout · (σ + 1.702·x·σ·(1−σ)).
func QuickGELUBackward(dinp, dout, inp []float32, n int) {
	ParallelFor(n, 1<<14, func(lo, hi int) {
		quickGELUBackwardKernel(dinp[lo:hi], dout[lo:hi], inp[lo:hi])
	})
}

// ReLUForward is max(x, 0) elementwise over n values.
func ReLUForward(out, inp []float32, n int) {
	for i := 0; i < n; i++ {
		if inp[i] > 0 {
			out[i] = inp[i]
		} else {
			out[i] = 0
		}
	}
}

// ReLUBackward accumulates dinp += dout where the forward output was positive.
// out is the forward output (ReLU can be differentiated from it).
func ReLUBackward(dinp, dout, out []float32, n int) {
	for i := 0; i < n; i++ {
		if out[i] > 0 {
			dinp[i] += dout[i]
		}
	}
}
