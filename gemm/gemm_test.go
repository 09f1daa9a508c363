package gemm

import (
	"math"
	"math/rand/v2"
	"testing"
)

// naive is the textbook triple loop the fast paths are checked against.
func naive(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				var av, bv float32
				if transA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += float64(av) * float64(bv)
			}
			c[i*ldc+j] = alpha*float32(s) + beta*c[i*ldc+j]
		}
	}
}

func TestSgemmMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ m, n, k int }{{1, 1, 1}, {3, 5, 7}, {64, 33, 17}, {130, 70, 257}} {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				lda, ldb, ldc := tc.k+2, tc.n+1, tc.n+3
				if ta {
					lda = tc.m + 2
				}
				if tb {
					ldb = tc.k + 1
				}
				ar, br := tc.m, tc.k
				if ta {
					ar = tc.k
				}
				if tb {
					br = tc.n
				}
				a := randVec(rng, ar*lda)
				b := randVec(rng, br*ldb)
				c := randVec(rng, tc.m*ldc)
				want := append([]float32(nil), c...)
				Sgemm(ta, tb, tc.m, tc.n, tc.k, 0.7, a, lda, b, ldb, 0.3, c, ldc)
				naive(ta, tb, tc.m, tc.n, tc.k, 0.7, a, lda, b, ldb, 0.3, want, ldc)
				for i := range c {
					if d := math.Abs(float64(c[i] - want[i])); d > 1e-4*(1+math.Abs(float64(want[i]))) {
						t.Fatalf("%s m%d n%d k%d ta %v tb %v: c[%d] = %v, want %v", Backend(), tc.m, tc.n, tc.k, ta, tb, i, c[i], want[i])
					}
				}
			}
		}
	}
}

func TestMatMulAccumulate(t *testing.T) {
	a := []float32{1, 2, 3, 4} // 2×2
	b := []float32{5, 6, 7, 8} // 2×2
	c := []float32{1, 1, 1, 1}
	MatMul(false, false, 2, 2, 2, a, b, c, true)
	want := []float32{20, 23, 44, 51}
	for i := range c {
		if c[i] != want[i] {
			t.Fatalf("c = %v, want %v", c, want)
		}
	}
}

func randVec(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = rng.Float32()*2 - 1
	}
	return v
}

// BenchmarkSgemm768 measures the GEMM shape of a ViT-B/16 MLP at batch 32.
func BenchmarkSgemm768(b *testing.B) {
	m, n, k := 32*197, 3072, 768
	rng := rand.New(rand.NewPCG(1, 2))
	x, w, y := randVec(rng, m*k), randVec(rng, n*k), make([]float32, m*n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		MatMul(false, true, m, n, k, x, w, y, false)
	}
	b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
