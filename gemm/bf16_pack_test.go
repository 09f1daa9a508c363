//go:build !purego && !nodnnl

package gemm

import (
	"math/rand/v2"
	"testing"
)

// TestPackedEqualsPlain: a product reading the weights reordered into
// oneDNN's layout equals, within bf16 accumulation-order noise, the one
// reading them as stored, both orientations, with bias and accumulation;
// and the packed copy is made once per weight matrix and orientation.
func TestPackedEqualsPlain(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	m, n, k := 77, 96, 64
	w, err := NewBF16Weights(randVec(rng, n*k), n, k)
	if err != nil {
		t.Fatal(err)
	}
	bias := randVec(rng, n)
	for _, transW := range []bool{true, false} {
		nn, kk := n, k
		if !transW {
			nn, kk = k, n // W read as [k,n]: the backward product dy·W
		}
		a := randVec(rng, m*kk)
		c0 := randVec(rng, m*nn)
		plain, packed := append([]float32(nil), c0...), append([]float32(nil), c0...)
		packBF16 = false
		MatMulBF16(transW, m, nn, kk, a, w, bias[:nn], plain, true)
		packBF16 = true
		MatMulBF16(transW, m, nn, kk, a, w, bias[:nn], packed, true)
		MatMulBF16(transW, m, nn, kk, a, w, bias[:nn], append([]float32(nil), c0...), true)
		scale := 0.0
		for _, v := range plain {
			scale = max(scale, float64(abs32(v)))
		}
		for i := range plain {
			if d := float64(abs32(plain[i] - packed[i])); d > 1e-5*scale {
				t.Fatalf("transW %v: c[%d] packed %v, plain %v", transW, i, packed[i], plain[i])
			}
		}
	}
	t.Logf("%d packed copies (%s kernels)", len(w.packs), CoreName())
	if len(w.packs) > 2 {
		t.Errorf("%d packed copies for two orientations: packing is not reused", len(w.packs))
	}
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

// BenchmarkViTShapesBF16Plain is BenchmarkViTShapesBF16 with the weights
// read as stored by every product (before packing).
func BenchmarkViTShapesBF16Plain(b *testing.B) {
	packBF16 = false
	defer func() { packBF16 = true }()
	benchViTShapesBF16(b)
}
