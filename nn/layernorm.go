package nn

// LayerNormEps is the epsilon of every LayerNorm in CLIP.
const LayerNormEps = 1e-5

// LayerNormForward normalises each row of inp over its C features.
//
//	inp, out: [N, C]; w, b: [C]; mean, rstd: [N] (saved for the backward pass; may be nil)
//
// out = (inp - mean) * rstd * w + b with rstd = 1/sqrt(var + eps) and the
// biased variance, as torch.nn.LayerNorm; float32 throughout (vectorised C,
// or Go under purego), rows split over the CPUs.
func LayerNormForward(out, mean, rstd, inp, w, b []float32, N, C int) {
	ParallelFor(N, 64, func(lo, hi int) {
		var m, r []float32
		if mean != nil {
			m, r = mean[lo:hi], rstd[lo:hi]
		}
		layerNormForwardKernel(out[lo*C:hi*C], m, r, inp[lo*C:hi*C], w, b, hi-lo, C)
	})
}

// LayerNormBackward accumulates the gradients of LayerNormForward.
//
//	dout, inp: [N, C]; mean, rstd: [N] from the forward pass; w: [C]
//	dinp: [N, C] (+=, may be nil); dw, db: [C] (+=, may be nil)
func LayerNormBackward(dinp, dw, db, dout, inp, mean, rstd, w []float32, N, C int) {
	if dinp != nil {
		ParallelFor(N, 64, func(lo, hi int) {
			layerNormBackwardDxKernel(dinp[lo*C:hi*C], dout[lo*C:hi*C], inp[lo*C:hi*C], mean[lo:hi], rstd[lo:hi], w, hi-lo, C)
		})
	}
	if dw != nil || db != nil {
		// columns split over the CPUs in blocks of 8, every row each
		ParallelFor((C+7)/8, 16, func(lo, hi int) {
			layerNormBackwardDwKernel(dw, db, dout, inp, mean, rstd, N, C, lo*8, min(hi*8, C))
		})
	}
}
