package nn

import "github.com/pfedmma/pfedmma/gemm"

// LinearForward is a fully connected layer in PyTorch layout.
//
//	inp: [N, IC]; w: [OC, IC]; b: [OC] or nil; out: [N, OC]
//
// out = inp · wᵀ + b.
func LinearForward(out, inp, w, b []float32, N, IC, OC int) {
	if b != nil {
		for i := 0; i < N; i++ {
			copy(out[i*OC:i*OC+OC], b)
		}
	}
	gemm.MatMul(false, true, N, OC, IC, inp, w, out, b != nil)
}

// LinearBackward accumulates the gradients of LinearForward.
//
//	dout: [N, OC]; inp: [N, IC]; w: [OC, IC]
//	dinp: [N, IC] (+=, may be nil); dw: [OC, IC] (+=, may be nil); db: [OC] (+=, may be nil)
func LinearBackward(dinp, dw, db, dout, inp, w []float32, N, IC, OC int) {
	if dinp != nil {
		gemm.MatMul(false, false, N, IC, OC, dout, w, dinp, true) // dinp += dout · w
	}
	if dw != nil {
		gemm.MatMul(true, false, OC, IC, N, dout, inp, dw, true) // dw += doutᵀ · inp
	}
	if db != nil {
		for i := 0; i < N; i++ {
			row := dout[i*OC : i*OC+OC]
			for j, v := range row {
				db[j] += v
			}
		}
	}
}

// MatMulForward multiplies by a matrix stored as [IC, OC] (CLIP's proj and
// text_projection: out = inp @ proj).
//
//	inp: [N, IC]; proj: [IC, OC]; out: [N, OC]
func MatMulForward(out, inp, proj []float32, N, IC, OC int) {
	gemm.MatMul(false, false, N, OC, IC, inp, proj, out, false)
}

// MatMulBackward accumulates the gradients of MatMulForward.
//
//	dout: [N, OC]; dinp: [N, IC] (+=, may be nil); dproj: [IC, OC] (+=, may be nil)
func MatMulBackward(dinp, dproj, dout, inp, proj []float32, N, IC, OC int) {
	if dinp != nil {
		gemm.MatMul(false, true, N, IC, OC, dout, proj, dinp, true) // dinp += dout · projᵀ
	}
	if dproj != nil {
		gemm.MatMul(true, false, IC, OC, N, inp, dout, dproj, true) // dproj += inpᵀ · dout
	}
}

// LinearForwardBF16 is LinearForward with the weight pre-rounded to
// bfloat16 (w [OC, IC]); inp is rounded on the fly and the products are
// accumulated in float32, the bias added in float32.
//
//	inp: [N, IC]; w: [OC, IC] bf16; b: [OC] or nil; out: [N, OC]
func LinearForwardBF16(out, inp []float32, w *gemm.BF16Weights, b []float32, N, IC, OC int) {
	gemm.MatMulBF16(true, N, OC, IC, inp, w, b, out, false)
}

// LinearInputGradBF16 is the input gradient of LinearForwardBF16 (the only
// one a frozen weight needs): dinp += dout · w in bfloat16 with float32
// accumulation.
//
//	dout: [N, OC]; w: [OC, IC] bf16; dinp: [N, IC] (+=)
func LinearInputGradBF16(dinp, dout []float32, w *gemm.BF16Weights, N, IC, OC int) {
	gemm.MatMulBF16(false, N, IC, OC, dout, w, nil, dinp, true)
}
