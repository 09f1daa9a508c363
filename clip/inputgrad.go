package clip

import "github.com/pfedmma/pfedmma/gemm"

// inputGrad writes dinp = dout · w [N, IC], the input gradient of a frozen
// linear layer (w [OC, IC], bfloat16 when wb is set), overwriting dinp:
// the product is written directly instead of cleared and accumulated,
// which saves two passes over dinp (the MLP's [rows, 4D] gradient is the
// largest buffer of a backward pass). A block with weight gradients takes
// the accumulating path with its weight and bias gradients.
//
//	dout: [N, OC]; dinp: [N, IC] (overwritten)
func (b *Block) inputGrad(dinp, dw, db, dout, inp, w []float32, wb *gemm.BF16Weights, N, IC, OC int) {
	if dw != nil || db != nil {
		clear(dinp[:N*IC])
		b.linearBackward(dinp, dw, db, dout, inp, w, wb, N, IC, OC)
		return
	}
	if wb != nil && b.G == nil {
		gemm.MatMulBF16(false, N, IC, OC, dout, wb, nil, dinp, false)
		return
	}
	gemm.MatMul(false, false, N, IC, OC, dout, w, dinp, false)
}
