package clip

import "github.com/pfedmma/pfedmma/gemm"

// The bfloat16 frozen path of the encoders that backpropagate through
// frozen blocks into something trainable before them (visual prompts,
// LoRA): private block copies keep the model's bfloat16 weights, and the
// extra products with a block's frozen in_proj use them too.

// frozenCopy is a block on b's weights (and, when b runs in bfloat16, its
// bfloat16 copies) without gradients, adapters or activations of its own:
// its forward products and input gradients run in b's precision.
func (b *Block) frozenCopy() *Block {
	c := &Block{W: b.W, D: b.D, H: b.H, MLP: b.MLP, Causal: b.Causal}
	if b.Precision() == gemm.BF16 {
		c.bf = b.bf
	}
	return c
}

// FrozenCopy is frozenCopy for packages that run a model's blocks with
// activations of their own (prompt encoders).
func (b *Block) FrozenCopy() *Block { return b.frozenCopy() }

// inProjRows is the bfloat16 view of in_proj rows [lo, hi) (D wide), nil
// when the block runs in float32.
func (b *Block) inProjRows(lo, hi int) *gemm.BF16Weights {
	if b.Precision() != gemm.BF16 {
		return nil
	}
	return b.bf.inProj.RowRange(lo, hi)
}

// Weight names one of a block's four weight matrices.
type Weight int

// The weight matrices of a block, PyTorch layout [out, in].
const (
	InProj  Weight = iota // in_proj_weight [3D, D]
	OutProj               // out_proj.weight [D, D]
	Fc                    // c_fc.weight [MLP, D]
	Proj                  // c_proj.weight [D, MLP]
)

// weight returns the float32 matrix, its bfloat16 copy (nil in float32
// mode), the bias and the in and out widths of wt.
func (b *Block) weight(wt Weight) (w []float32, wb *gemm.BF16Weights, bias []float32, in, out int) {
	D, MLP, W := b.D, b.MLP, b.W
	switch wt {
	case InProj:
		w, wb, bias, in, out = W.InProjW, b.bf.inProj, W.InProjB, D, 3*D
	case OutProj:
		w, wb, bias, in, out = W.OutProjW, b.bf.outProj, W.OutProjB, D, D
	case Fc:
		w, wb, bias, in, out = W.FcW, b.bf.fc, W.FcB, D, MLP
	default:
		w, wb, bias, in, out = W.ProjW, b.bf.proj, W.ProjB, MLP, D
	}
	if b.Precision() != gemm.BF16 {
		wb = nil
	}
	return w, wb, bias, in, out
}

// FrozenLinear is out = inp · Wᵀ + b for the block's weight wt, in the
// block's precision (bfloat16 with float32 accumulation when it runs in
// bfloat16), for callers that run the block's layers on rows of their own
// (the prompt encoders' packed rows).
//
//	inp: [N, in]; out: [N, out]
func (b *Block) FrozenLinear(wt Weight, out, inp []float32, N int) {
	w, wb, bias, in, o := b.weight(wt)
	b.linearForward(out, inp, w, wb, bias, N, in, o)
}

// FrozenLinearInputGrad is FrozenLinear's input gradient, dinp += dout · W,
// in the block's precision (no weight gradients).
//
//	dout: [N, out]; dinp: [N, in] (+=)
func (b *Block) FrozenLinearInputGrad(wt Weight, dinp, dout []float32, N int) {
	w, wb, _, in, o := b.weight(wt)
	b.linearBackward(dinp, nil, nil, dout, nil, w, wb, N, in, o)
}
