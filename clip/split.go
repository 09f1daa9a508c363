package clip

import "github.com/pfedmma/pfedmma/nn"

// Split records. When a method's first adapted block ℓ only adds a branch
// parallel to the whole block (pFedMMA's adapter: y = block(x) + α·A(ln_1(x))),
// neither block(x) nor ln_1(x) depends on a trainable parameter. A split
// record keeps both, per image:
//
//	[h | f]   h = ln_1(x) [T, D], the branch's input
//	          f = block_ℓ(x) [T, D], the frozen block's output
//
// so block ℓ runs once per image instead of at every step; the method adds
// its branch to f and runs blocks ℓ+1..L. Computed in the same batches as the
// plain prefix, the records are bit-identical under any BLAS kernel to what
// running block ℓ in the step gives.

// SplitLen is the number of floats of one split record of an encoder with T
// tokens of width D.
func SplitLen(T, D int) int { return 2 * T * D }

// FrozenBlock runs block i (0-based) of the stack on x [B, T, D] without its
// adapter or q/k/v delta, writing h = ln_1(x) into h [B·T, D] and the
// block's output into out [B·T, D].
func (s *Stack) FrozenBlock(h, out, x []float32, B, T, i int) {
	b := s.Blocks[i]
	ad, qkv := b.Adapter, b.QKV
	b.Adapter, b.QKV = nil, nil
	b.Forward(out, x, B, T, nil, false, &s.scratch)
	b.Adapter, b.QKV = ad, qkv
	n := B * T * b.D
	copy(h[:n], s.scratch.acts.ln1[:n])
}

// ImageSplitRecords computes the split records [B, 2, T, Dv] of images for
// a method adapted from block start (1 ≤ start < L): ImagePrefix, then block
// start frozen. The result is written into dst (grown as needed) and
// returned.
func ImageSplitRecords(m *Model, start int, pixels []float32, B int, dst []float32) []float32 {
	v := m.Vision
	T, D := v.Cfg.Tokens(), v.Cfg.Width
	x := ImagePrefix(m, start, pixels, B, nil)
	return SplitRecords(&v.Stack, start, x, B, T, D, dst)
}

// SplitRecords runs block start (1-based) of the stack frozen on prefixes x
// [B, T, D] and writes the split records [B, 2, T, D] into dst (grown as
// needed).
func SplitRecords(s *Stack, start int, x []float32, B, T, D int, dst []float32) []float32 {
	TD := T * D
	s.split[0], s.split[1] = nn.Grow(s.split[0], B*TD), nn.Grow(s.split[1], B*TD)
	h, f := s.split[0], s.split[1]
	s.FrozenBlock(h, f, x, B, T, start-1)
	dst = nn.Grow(dst, B*2*TD)
	for b := 0; b < B; b++ {
		copy(dst[2*b*TD:], h[b*TD:(b+1)*TD])
		copy(dst[(2*b+1)*TD:], f[b*TD:(b+1)*TD])
	}
	return dst
}

// Unsplit copies the halves of B split records [B, 2, T, D] into h and f
// [B, T, D] (grown as needed) and returns them.
func Unsplit(rec []float32, B, T, D int, h, f []float32) ([]float32, []float32) {
	TD := T * D
	h, f = nn.Grow(h, B*TD), nn.Grow(f, B*TD)
	for b := 0; b < B; b++ {
		copy(h[b*TD:(b+1)*TD], rec[2*b*TD:])
		copy(f[b*TD:(b+1)*TD], rec[(2*b+1)*TD:])
	}
	return h, f
}

// SplitOutputs copies the frozen outputs f of B split records [B, 2, T, D]
// into f [B, T, D] (grown as needed) and returns it.
func SplitOutputs(rec []float32, B, T, D int, f []float32) []float32 {
	TD := T * D
	f = nn.Grow(f, B*TD)
	for b := 0; b < B; b++ {
		copy(f[b*TD:(b+1)*TD], rec[(2*b+1)*TD:])
	}
	return f
}
