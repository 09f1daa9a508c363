package gemm

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkViTShapes measures the four linear layers of a ViT-B/16 block at
// batch 32 (x · Wᵀ with W in PyTorch [out, in] layout).
func BenchmarkViTShapes(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range []struct{ n, k int }{{2304, 768}, {768, 768}, {3072, 768}, {768, 3072}} {
		m := 32 * 197
		b.Run(fmt.Sprintf("%dx%dx%d", m, s.n, s.k), func(b *testing.B) {
			x, w, y := randVec(rng, m*s.k), randVec(rng, s.n*s.k), make([]float32, m*s.n)
			MatMul(false, true, m, s.n, s.k, x, w, y, false)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				MatMul(false, true, m, s.n, s.k, x, w, y, false)
			}
			b.ReportMetric(2*float64(m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
