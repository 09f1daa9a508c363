//go:build purego || nodnnl

package gemm

// Without oneDNN (the purego build, or -tags nodnnl) bfloat16 products are
// emulated: same rounding, float32 speed or less.
const bf16Backend = "emulated"

func newBF16Storage(b *BF16Weights, w []float32) {
	b.f32 = make([]float32, len(w))
	for i, v := range w {
		b.f32[i] = RoundBF16(v)
	}
}

func matMulBF16(transW bool, m, n, k int, a []float32, w *BF16Weights, bias, c []float32, accumulate bool) {
	emulatedMatMulBF16(transW, m, n, k, a, w, bias, c, accumulate)
}

// packs: emulation reads the weights as stored.
type packs struct{}
